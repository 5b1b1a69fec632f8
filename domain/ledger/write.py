"""The one way into the ledger and the ways out of it.

In: every producer (order events, journeys, lifecycle events, the send API, one-time codes) calls `ledger_message`
(or `ledger_messages` for several at once, one statement) inside its own unit of work.

The row is written before anything is sent. Its dedupe key is deterministic (recipient + template + channel + the
period or subject the message is about), and an existing key means skip: the caller gets the row that is already
there, whatever its status, and nothing new is owed. Under concurrency `INSERT … ON CONFLICT DO NOTHING` makes the
losers wait for the winner and then read its row, so 30 identical requests make one row and no error.

Out, each moving money only when its guarded update matched:
- `settle_unsent`: one row, QUEUED -> SUPPRESSED | FAILED under the caller's claim token; what the row holds is
  given back and a live nudge with nothing left owed is closed (no phantom intent).
- `settle_unsent_where`: many rows at once for cancel and supersede (a campaign's rows, a superseded nudge's rows):
  QUEUED -> SUPPRESSED only while no live lease holds the row, with the same give-back.
- `accept_truth`: the provider (or the customer's endpoint) accepted a send. That is a fact, whatever the row says
  by now: a row still owed becomes SENT (DELIVERED for a webhook); a row that was settled unsent after its lease
  ran out becomes SENT too, is charged again, and says why (`late_accept`); a row already sent stays as it is.

And a row's receipts leave with it: each of these (and the worker's one-statement record of a send, and a new
receipt) ends by calling `settle_receipts` for the rows it settled, so a provider's receipt kept while its row was
owed is applied or closed in the transaction that settles the row, however that happens — never left pending on a
row that can no longer change (`outbox check` invariant 14; `outbox archive` waits only on rows still owed).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from domain.db import UnitOfWork
from domain.ledger import metering, sql
from domain.ledger.owed import OwedRow
from domain.settings import get_settings


@dataclass(frozen=True)
class NewMessage:
    tenant_id: int
    recipient: str
    channel: str
    lane: str
    template: str
    subject: str  # the period or fact the message is about: "2026-11-29", "order-913-r18", "lead-5-intent-9"
    payload: dict[str, Any] = field(default_factory=dict)
    next_attempt_at: datetime | None = None  # None: due now
    event_id: uuid.UUID | None = None
    order_id: int | None = None
    intent_id: int | None = None
    endpoint_id: int | None = None  # a tenant's webhook endpoint (domain/endpoints/)

    @property
    def dedupe_key(self) -> str:
        return dedupe_key(self.tenant_id, self.channel, self.recipient, self.template, self.subject)


@dataclass(frozen=True)
class Ledgered:
    notification_id: int
    lane: str
    job_id: str
    status: str
    created: bool  # False: the key existed, nothing new is owed
    tenant_id: int = 0
    created_at: datetime | None = None  # its month (the ledger's partition key), which its wake-up carries

    def owed(self) -> OwedRow:
        """What this row owes the runtime after commit: its ids, never its payload (a bulk message one by one is
        its tenant's flow 0 on the fair bulk lane)."""
        flow = f"{self.tenant_id}:0" if self.lane == "bulk" and self.tenant_id else ""
        return OwedRow(self.notification_id, self.lane, self.job_id, flow, created_at=self.created_at)


def ledger_message(uow: UnitOfWork, m: NewMessage) -> Ledgered:
    """Write the ledger row (or find the one already there). Never commits: the caller's transaction decides."""
    return ledger_messages(uow, [m])[0]


def ledger_messages(uow: UnitOfWork, ms: Sequence[NewMessage]) -> list[Ledgered]:
    """`ledger_message` for several messages in one statement (one round trip): their rows in the order given, each
    new or the one already there under its key (a key given twice is written once; the second is a skip). The
    statements that find existing rows run only when a key was skipped. Never commits."""
    if not ms:
        return []
    rows = json.dumps([{
        "n": n, "t": m.tenant_id, "r": m.recipient, "c": m.channel, "l": m.lane, "tpl": m.template, "p": m.payload,
        "k": m.dedupe_key, "at": m.next_attempt_at.isoformat() if m.next_attempt_at else None, "e": m.event_id,
        "o": m.order_id, "i": m.intent_id, "ep": m.endpoint_id} for n, m in enumerate(ms)], default=str)
    made = {r.dedupe_key: r for r in uow.fetch(sql.INSERT_MESSAGES, {"rows": rows, "max": get_settings().max_attempts})}
    skipped = [m.dedupe_key for m in ms if m.dedupe_key not in made]
    prior = {r.dedupe_key: r for r in uow.execute(sql.EXISTING, {"k": skipped})} if skipped else {}
    out: list[Ledgered] = []
    for m in ms:
        row = made.pop(m.dedupe_key, None)
        if row is not None:
            out.append(Ledgered(row.id, row.lane, row.job_id, row.status, created=True, tenant_id=m.tenant_id,
                                created_at=row.created_at))
            prior[m.dedupe_key] = row  # the same key again in this batch: the row just written, a skip
            continue
        p = prior[m.dedupe_key]
        out.append(Ledgered(p.id, p.lane, p.job_id, p.status, created=False, tenant_id=m.tenant_id,
                            created_at=p.created_at))
    return out


@dataclass(frozen=True)
class AudienceBatch:
    picked: int  # fewer than asked for: the audience is exhausted
    inserted: int  # new rows; a key that existed was skipped
    last_recipient_id: int | None  # the keyset position to resume after


def ledger_audience_batch(uow: UnitOfWork, *, tenant_id: int, campaign_id: int, audience: str, after: int,
                          limit: int, channel: str, lane: str, template: str,
                          payload: dict[str, Any]) -> AudienceBatch:
    """The bulk way in (a campaign's fan-out): the next `limit` people after recipient id `after` that `audience`
    (an SQL condition over `recipients r`, binding `:t` and `:channel`) selects, one row each in one statement,
    with the same dedupe rule as `ledger_message` (key: campaign + recipient + channel; existing key means skip).
    Never commits."""
    prefix, suffix = dedupe_key(tenant_id, channel, "{ref}", template, f"campaign-{campaign_id}").split("{ref}")
    b = uow.execute(sql.insert_audience_batch(audience), {
        "t": tenant_id, "after": after, "n": limit, "c": channel, "channel": channel, "l": lane, "tpl": template,
        "p": json.dumps(payload, default=str), "prefix": prefix, "suffix": suffix,
        "max": get_settings().max_attempts, "cid": campaign_id}).one()
    if b.inserted:
        uow.execute(sql.NOTIFY_OWED, {"lane": lane})
    return AudienceBatch(int(b.picked), int(b.inserted), b.last_id)


def dedupe_key(tenant_id: int, channel: str, recipient: str, template: str, subject: str) -> str:
    """Deterministic: recipient + template + the subject/period the message is about."""
    return f"t{tenant_id}:{channel}:{recipient}:{template}:{subject}"


def settle_unsent(uow: UnitOfWork, notification_id: int, token: int, *, status: str, reason: str | None = None,
                  detail: str | None = None, error_class: str | None = None, review: str | None = None,
                  refund_reason: str = "refund: not sent", intent_why: str | None = None) -> bool:
    """Settle a row unsent under claim `token`. False: the token is stale (another claim owns the row, or it is
    settled already) and nothing changed, no money moved."""
    row = uow.execute(sql.SETTLE_UNSENT, {"s": status, "r": reason, "d": detail, "e": error_class, "rv": review,
                                       "id": notification_id, "tok": token}).first()
    if row is None:
        return False
    metering.release(uow, notification_id, refund_reason)
    if row.intent_id is not None:
        finish_intent_if_nothing_left(uow, int(row.intent_id), intent_why or f"{status.lower()}: {reason}")
    settle_receipts(uow, [notification_id])
    return True


def settle_unsent_where(uow: UnitOfWork, *, reason: str, campaign_id: int | None = None,
                        intent_ids: Collection[int] | sa.Select[tuple[int]] | None = None,
                        endpoint: tuple[int, int] | None = None, detail: str | None = None,
                        refund_reason: str = "refund: not sent", close_intents: bool = True,
                        skip_locked: bool = False) -> list[int]:
    """Settle SUPPRESSED (`reason`, with `detail` in plain words) every row of one campaign, of the given intents (ids,
    or a SELECT of them) or of one (tenant, endpoint), that is still owed and that no live lease holds: a row handed to
    a worker is that worker's to record (sent or not), and a later claim refuses it. An endpoint's rows locked by
    another transaction (a stalled worker's record) are skipped too: the disabling record holds the endpoint row that
    record waits for. What each settled row holds is given back. With `close_intents`, a nudge left with nothing owed is
    closed (as `settle_unsent` does); a caller that ends the intents itself (supersede) passes False. Returns the ids
    settled, in no particular order."""
    if sum(x is not None for x in (campaign_id, intent_ids, endpoint)) != 1:
        raise ValueError("settle_unsent_where: give exactly one of campaign_id, intent_ids, endpoint")
    if intent_ids is not None and not isinstance(intent_ids, sa.Select) and not intent_ids:
        return []  # no intents: nothing of theirs to settle
    rows = uow.execute(sql.settle_unleased(reason, campaign_id=campaign_id, intent_ids=intent_ids,
                                           endpoint=endpoint, detail=detail, skip_locked=skip_locked)).all()
    for r in rows:
        if r.holds:  # only a row a claim already charged (a retry in progress) holds anything to give back
            metering.release(uow, int(r.id), refund_reason)
    settle_receipts(uow, [int(r.id) for r in rows])
    if close_intents:
        for intent_id in sorted({int(r.intent_id) for r in rows if r.intent_id is not None}):
            finish_intent_if_nothing_left(uow, intent_id, f"suppressed: {reason}")
    return [int(r.id) for r in rows]



def finish_intent_if_nothing_left(uow: UnitOfWork, intent_id: int, why: str) -> None:
    """An intent whose messages all ended unsent is over: it must not stay a phantom live nudge.

    The intent row is locked first, in its own statement: two transactions settling the nudge's two rows (the
    applicant's and the advisor's) take turns, and the second one's check runs on a snapshot taken after the first
    committed, so it sees both rows settled (under READ COMMITTED a single UPDATE would judge its NOT EXISTS on the
    snapshot from before it waited)."""
    uow.execute(sql.LOCK_INTENT, {"i": intent_id})
    uow.execute(sql.FINISH_INTENT_IF_NOTHING_LEFT, {"i": intent_id, "why": why})


@dataclass(frozen=True)
class Accepted:
    outcome: str  # sent | late_accept | already_recorded
    status: str  # the row's status afterwards


def accept_truth(uow: UnitOfWork, notification_id: int, *, final: str, provider_reference: str | None,
                 delivered: bool = False, sent_key: str | None = None) -> Accepted:
    """Record that the other side accepted a send (or a receipt says it was delivered). Never dropped: a late
    truth is recorded as the truth, charged, counted against the person's cap, and explained; the receipts pending
    on the row are settled against what it now says (`settle_receipts`).

    `sent_key` is the idempotency key a worker's attempt sent (None for a receipt, already matched to the row's
    current identity). An answer about an identity the row no longer has (it was replayed as a new message since)
    or about a message the provider has since said it could not deliver is old news: "stale", nothing changes."""
    got = _accept(uow, notification_id, final=final, provider_reference=provider_reference, delivered=delivered,
                  sent_key=sent_key)
    if got.outcome != "stale" and got.status != "missing":
        settle_receipts(uow, [notification_id])
    return got


def settle_receipts(uow: UnitOfWork, notification_ids: Collection[int]) -> list[int]:
    """The one way out of `pending` for a provider's receipt: every receipt kept on these rows (just settled, in
    this transaction, however: a record, a suppressing claim, a cancel, a supersede, an endpoint disabled, the
    truth, a new receipt) applied or closed against how its row now stands. Returns the receipts settled.

    - `delivered` on a row not DELIVERED: the truth (SENT -> DELIVERED; a row that ended unsent is the late truth,
      DELIVERED and charged again, with why);
    - `failed` on a SENT row: FAILED `undeliverable`, refunded (the tenant does not pay for it) — once: the row is
      FAILED after the first, and a second `failed` receipt moves no money;
    - `failed` on a FAILED row: applied, the row says `undeliverable` (a replay is then a new message for the
      provider); `delivered` on a DELIVERED row: applied (it agrees);
    - `failed` on a DELIVERED row (DELIVERED is final) or on a row settled unsent (SUPPRESSED: nothing charged,
      nothing to refund): closed, `closed_reason` saying why;
    - `failed` on a row still owed (QUEUED: the worker has not recorded the send): kept, for whatever settles it.

    Money moves only for the first two, one receipt at a time against the row as it then stands (locked); the rest
    is one statement, and so is the common case of a batch of receipts — `delivered` on rows SENT, charged at the
    send (`sql.DELIVER_SENT_ROWS`). Safe to call for any rows: when nothing is pending on them (nearly always) it is
    one probe of the partial index `delivery_receipts_pending`. Never commits."""
    ids = sorted({int(i) for i in notification_ids})
    pending = uow.execute(sql.PENDING_ON_ROWS, {"ids": ids}).all() if ids else []
    if not pending:
        return []
    done: list[int] = []
    delivered: dict[int, int] = {}  # receipt -> its row, just moved SENT -> DELIVERED (a batch's common case)
    if any(r.outcome == "delivered" and r.status == "SENT" for r in pending):
        delivered = {int(a.id): int(a.notification_id) for a in uow.execute(sql.DELIVER_SENT_ROWS, {"ids": ids})}
        done += list(delivered)
    delivered_rows = set(delivered.values())
    passed: set[int] = set()  # rows with a receipt passed over (it moves nothing), not settled yet
    # In the order they came (receipt ids), across rows: a batch's refund that came before another row's late
    # charge is there to pay for it, as when each came alone.
    for r in sorted(pending, key=lambda p: int(p.id)):
        nid = int(r.notification_id)
        now = "DELIVERED" if nid in delivered_rows else r.status
        if int(r.id) in delivered:
            continue
        if not _moves(r.outcome, now):
            passed.add(nid)
            continue
        if nid in passed:  # the row's earlier receipts, settled against the row as it stood when they came
            done += [int(i) for i in uow.execute(sql.SETTLE_RECEIPTS, {"ids": [nid], "before": r.id}).scalars()]
            passed.discard(nid)
        status = uow.execute(sql.ROW_FOR_RECEIPT, {"n": nid}).scalar()
        # An earlier receipt of the row may have moved it since (then the statement below settles this one), and
        # a receipt is applied once: the guarded mark decides before any money moves.
        if not _moves(r.outcome, status) or uow.execute(
                sql.RECEIPT_APPLIED, {"i": r.id, "at": r.received_at}).first() is None:
            passed.add(nid)
            continue
        if r.outcome == "delivered":
            _accept(uow, nid, final="DELIVERED", provider_reference=str(r.provider_reference), delivered=True)
        else:
            uow.execute(sql.SENT_UNDELIVERABLE, {"n": nid})
            metering.release(uow, nid, "refund: provider could not deliver")
        done.append(int(r.id))
    if done or any(r.status != "QUEUED" for r in pending):  # else: all still wait for their rows to be settled
        done += [int(i) for i in uow.execute(sql.SETTLE_RECEIPTS, {"ids": ids, "before": None}).scalars()]
    return done


def _moves(outcome: str, status: str | None) -> bool:
    """A receipt that moves its row (and money): the truth on a row not DELIVERED yet, a bounce of a SENT row."""
    return (outcome == "delivered" and status != "DELIVERED") or (outcome == "failed" and status == "SENT")


def _accept(uow: UnitOfWork, notification_id: int, *, final: str, provider_reference: str | None,
            delivered: bool = False, sent_key: str | None = None) -> Accepted:
    """`accept_truth` without its receipts (`settle_receipts` applies a `delivered` receipt through this)."""
    row = uow.execute(sql.READ_FOR_TRUTH, {"id": notification_id}).first()
    if row is None:
        return Accepted("already_recorded", "missing")
    if sent_key is not None and (sent_key != row.current_key or (
            row.status in ("FAILED", "SUPPRESSED") and row.last_error_class == "undeliverable")):
        return Accepted("stale", str(row.status))
    if row.status in ("SENT", "DELIVERED"):
        to = "DELIVERED" if delivered or row.status == "DELIVERED" else "SENT"
        uow.execute(sql.RECORD_AGAIN, {"s": to, "p": provider_reference, "id": notification_id})
        return Accepted("already_recorded", to)
    to = "DELIVERED" if delivered else final
    late = row.status != "QUEUED"
    detail = None
    if late:
        was = row.suppressed_reason or row.last_error_class or "unsent"
        detail = f"accepted after it was settled {row.status.lower()} ({was}): recorded as sent and charged"
    uow.execute(sql.RECORD_SENT, {"s": to, "p": provider_reference, "d": detail, "id": notification_id})
    if row.cap_day is None and row.channel != "webhook" and row.lane != "critical":
        _count_against_cap(uow, row, notification_id)
    if row.reserved_cents == 0 and row.cost_cents > 0 and not metering.reserve(
            uow, tenant_id=row.tenant_id, notification_id=notification_id, cost_cents=row.cost_cents,
            reason=f"{row.channel} {row.template} (accepted late)"):
        # The balance was spent while the row stood unsent: the truth stays (it was sent); `outbox check` shows
        # the uncharged message and the detail says why.
        uow.execute(sql.SET_REASON_DETAIL, {"d": "accepted late; the balance could not cover it",
                                            "id": notification_id})
    if row.intent_id is not None:
        uow.execute(sql.INTENT_SENT, {"i": row.intent_id})
    return Accepted("late_accept" if late else "sent", to)


def _count_against_cap(uow: UnitOfWork, row: Any, notification_id: int) -> None:
    """A sent message holds a slot of its person's cap for their local day (a late truth gave its slot back when
    it was settled unsent): taken again, without the cap check — it was sent."""
    rcp = uow.execute(sql.RECIPIENT_CAP, {"t": row.tenant_id, "r": row.recipient}).first()
    if rcp is None or rcp.daily_cap is None:
        return
    day = datetime.now(ZoneInfo(rcp.timezone)).date()
    metering.count_sent_against_cap(uow, tenant_id=row.tenant_id, recipient=row.recipient, day=day,
                                    notification_id=notification_id)


def unleased_of_campaign(uow: UnitOfWork, campaign_id: int) -> int:
    """A campaign's rows still owed that no live lease holds (what a cancel's passes have still to settle)."""
    return int(uow.execute(sql.COUNT_UNLEASED_OF_CAMPAIGN, {"c": campaign_id}).scalar_one())

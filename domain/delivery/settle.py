"""How a ledger row ends: the two ways out, each moving money only when its guarded update matched.

- `settle_unsent`: QUEUED -> SUPPRESSED | FAILED under the caller's claim token (or, for cancel and supersede, only
  while no live lease holds the row); what the row holds is given back and a live nudge with nothing left owed
  is closed (no phantom intent).
- `accept_truth`: the provider (or the customer's endpoint) accepted a send. That is a fact, whatever the row says
  by now: a row still owed becomes SENT (DELIVERED for a webhook); a row that was settled unsent after its lease
  ran out becomes SENT too, is charged again, and says why (`late_accept`); a row already sent stays as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from domain import metering
from domain.db import UnitOfWork

_SETTLE_UNSENT = sa.text(
    "UPDATE notifications SET status = CAST(:s AS text), suppressed_reason = :r, reason_detail = :d, "
    "last_error_class = coalesce(:e, last_error_class), review = :rv, settled_at = now(), leased_until = NULL "
    "WHERE id = :id AND status = 'QUEUED' AND claim_token = :tok RETURNING intent_id")


def settle_unsent(uow: UnitOfWork, notification_id: int, token: int, *, status: str, reason: str | None = None,
                  detail: str | None = None, error_class: str | None = None, review: str | None = None,
                  refund_reason: str = "refund: not sent", intent_why: str | None = None) -> bool:
    """Settle a row unsent under claim `token`. False: the token is stale (another claim owns the row, or it is
    settled already) and nothing changed, no money moved."""
    row = uow.execute(_SETTLE_UNSENT, {"s": status, "r": reason, "d": detail, "e": error_class, "rv": review,
                                       "id": notification_id, "tok": token}).first()
    if row is None:
        return False
    metering.release(uow, notification_id, refund_reason)
    if row.intent_id is not None:
        finish_intent_if_nothing_left(uow, int(row.intent_id), intent_why or f"{status.lower()}: {reason}")
    return True


def finish_intent_if_nothing_left(uow: UnitOfWork, intent_id: int, why: str) -> None:
    """An intent whose messages all ended unsent is over: it must not stay a phantom live nudge.

    The intent row is locked first, in its own statement: two transactions settling the nudge's two rows (the
    applicant's and the advisor's) take turns, and the second one's check runs on a snapshot taken after the first
    committed, so it sees both rows settled (under READ COMMITTED a single UPDATE would judge its NOT EXISTS on the
    snapshot from before it waited)."""
    uow.execute(sa.text("SELECT 1 FROM lead_notification_intents WHERE id = :i FOR NO KEY UPDATE"), {"i": intent_id})
    uow.execute(sa.text(
        "UPDATE lead_notification_intents i SET status = 'suppressed', final_reason = :why, updated_at = now() "
        "WHERE i.id = :i AND i.status IN ('pending', 'scheduled') AND NOT EXISTS ("
        "  SELECT 1 FROM notifications n WHERE n.intent_id = i.id AND n.status IN ('QUEUED', 'SENT', 'DELIVERED'))"),
        {"i": intent_id, "why": why})


@dataclass(frozen=True)
class Accepted:
    outcome: str  # sent | late_accept | already_recorded
    status: str  # the row's status afterwards


def accept_truth(uow: UnitOfWork, notification_id: int, *, final: str, provider_reference: str | None,
                 delivered: bool = False) -> Accepted:
    """Record that the other side accepted a send (or a receipt says it was delivered). Never dropped: a late
    truth is recorded as the truth, charged, and explained."""
    row = uow.execute(sa.text(
        "SELECT status, suppressed_reason, last_error_class, reserved_cents, cost_cents, tenant_id, channel, "
        "template, intent_id, provider_reference FROM notifications WHERE id = :id FOR UPDATE"),
        {"id": notification_id}).first()
    if row is None:
        return Accepted("already_recorded", "missing")
    if row.status in ("SENT", "DELIVERED"):
        to = "DELIVERED" if delivered or row.status == "DELIVERED" else "SENT"
        uow.execute(sa.text(
            "UPDATE notifications SET status = CAST(:s AS text), provider_reference = coalesce(provider_reference, :p), "
            "settled_at = CASE WHEN CAST(:s AS text) = 'DELIVERED' THEN coalesce(settled_at, now()) END "
            "WHERE id = :id"), {"s": to, "p": provider_reference, "id": notification_id})
        return Accepted("already_recorded", to)
    to = "DELIVERED" if delivered else final
    late = row.status != "QUEUED"
    detail = None
    if late:
        was = row.suppressed_reason or row.last_error_class or "unsent"
        detail = f"accepted after it was settled {row.status.lower()} ({was}): recorded as sent and charged"
    # A claim that follows (a second worker whose lease began after ours ran out) is fenced out by the new token.
    uow.execute(sa.text(
        "UPDATE notifications SET status = CAST(:s AS text), provider_reference = coalesce(:p, provider_reference), "
        "sent_at = coalesce(sent_at, now()), settled_at = CASE WHEN CAST(:s AS text) = 'DELIVERED' THEN now() END, "
        "leased_until = NULL, last_error_class = NULL, suppressed_reason = NULL, review = NULL, reason_detail = :d, "
        "claim_token = claim_token + 1 WHERE id = :id"),
        {"s": to, "p": provider_reference, "d": detail, "id": notification_id})
    if row.reserved_cents == 0 and row.cost_cents > 0 and not metering.reserve(
            uow, tenant_id=row.tenant_id, notification_id=notification_id, cost_cents=row.cost_cents,
            reason=f"{row.channel} {row.template} (accepted late)"):
        # The balance was spent while the row stood unsent: the truth stays (it was sent); `outbox check` shows
        # the uncharged message and the detail says why.
        uow.execute(sa.text("UPDATE notifications SET reason_detail = :d WHERE id = :id"),
                    {"d": "accepted late; the balance could not cover it", "id": notification_id})
    if row.intent_id is not None:
        uow.execute(sa.text(
            "UPDATE lead_notification_intents SET status = 'sent', updated_at = now(), "
            "final_reason = 'sent at ' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC' "
            "WHERE id = :i AND status IN ('pending', 'scheduled')"), {"i": row.intent_id})
    return Accepted("late_accept" if late else "sent", to)

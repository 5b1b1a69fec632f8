"""Campaigns on the bulk lane: a named segment (code, never a template) × one template × one channel.

The audience is code: each segment is a named, tested function returning the SQL condition over `recipients r` (and the
tenant) that selects who gets it. Fan-out writes the ledger through its bulk way in (`ledger_audience_batch`: one
multi-row `INSERT … SELECT` per batch), each row with its dedupe key (campaign + recipient + channel) through the
ledger's "existing key means skip" rule, and records its keyset position after each batch: a crash mid-fan-out resumes
after the last batch and any overlap is skipped, never duplicated. Progress is counted from the campaign's ledger rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.access import actions as operator_actions
from domain.campaigns import sql
from domain.campaigns.segments import SEGMENTS
from domain.db import UnitOfWork, is_deadlock
from domain.ledger.recipients import PEOPLE_CHANNELS
from domain.ledger.send import SendRefused, check_template
from domain.ledger.write import (
    ledger_audience_batch,
    settle_unsent_where,
    unleased_of_campaign,
)

LANE: Final[str] = "bulk"
BATCH: Final[int] = 5_000


# Templates whose messages the system sends on its own, each at its moment: a campaign of them would tell people of
# an order change that never happened, or send a code nobody asked for (so the campaign form never offers them).
SYSTEM_TEMPLATES: dict[str, str] = {"order_update": "when an order changes", "otp_code": "when a code is asked for"}


def create(*, tenant_id: int, name: str, segment: str, template: str, channel: str, actor_ref: str,
           note: str = "", engine: Engine | None = None) -> int:
    if segment not in SEGMENTS:
        raise SendRefused("unknown_segment", f"no segment {segment!r}; segments are {', '.join(SEGMENTS)}")
    if channel not in PEOPLE_CHANNELS:
        raise SendRefused("unknown_channel", f"campaigns go by {', '.join(PEOPLE_CHANNELS)}, not {channel!r}")
    if template in SYSTEM_TEMPLATES:
        raise SendRefused("not_a_campaign_template",
                          f"{template!r} is sent by the system itself ({SYSTEM_TEMPLATES[template]}), "
                          "never by a campaign")
    with UnitOfWork(engine) as uow:
        check_template(uow, template, channel)
        total = uow.execute(sql.count_audience(SEGMENTS[segment](channel)),
                            {"t": tenant_id, "channel": channel}).scalar_one()
        cid = uow.execute(sql.INSERT_CAMPAIGN, {"t": tenant_id, "n": name, "s": segment, "tpl": template,
                                                "c": channel, "total": total, "a": actor_ref}).scalar_one()
        operator_actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="campaign start",
                                target=f"campaign {cid} ({segment}, {total} people)", note=note)
        uow.commit()
    return int(cid)


@dataclass(frozen=True)
class Batch:
    inserted: int
    done: bool


def fan_out_batch(campaign_id: int, batch: int = BATCH, engine: Engine | None = None) -> Batch:
    """Ledger the next `batch` recipients of the segment (one transaction). Idempotent: re-running a batch that
    committed finds its keys and skips them."""
    with UnitOfWork(engine) as uow:
        c = uow.execute(sql.LOCK_CAMPAIGN, {"i": campaign_id}).first()
        if c is None or c.status != "ledgering":
            return Batch(0, True)
        b = ledger_audience_batch(
            uow, tenant_id=c.tenant_id, campaign_id=c.id, audience=SEGMENTS[c.segment](c.channel),
            after=c.last_recipient_id, limit=batch, channel=c.channel, lane=LANE, template=c.template,
            payload={"headline": c.name, "campaign_id": c.id})
        done = b.picked < batch
        uow.execute(sql.ADVANCE, {"k": b.inserted, "last": b.last_recipient_id, "done": done, "i": c.id})
        uow.commit()
    return Batch(b.inserted, done)


def fan_out(campaign_id: int, batch: int = BATCH, progress: Callable[[int], None] | None = None,
            engine: Engine | None = None) -> int:
    """Every remaining batch; returns rows ledgered by this call."""
    total = 0
    while True:
        b = fan_out_batch(campaign_id, batch, engine)
        total += b.inserted
        if progress:
            progress(total)
        if b.done:
            return total


def unfinished(engine: Engine | None = None) -> list[int]:
    """Campaigns whose fan-out has not finished (the relay's scan resumes them)."""
    with UnitOfWork(engine) as uow:
        return [int(i) for i in uow.execute(sql.UNFINISHED).scalars()]


def cancel(tenant_id: int, campaign_id: int, engine: Engine | None = None, *, actor_ref: str = "system",
           note: str = "") -> int | None:
    """Stop the fan-out and suppress what is still owed (`campaign_cancelled`); a row a worker holds is left to
    that worker. One audit row (who, how many, the note) in the transaction that cancels: it cannot be undone.
    Cancelling it again, or a campaign already done, changes nothing and is not recorded.
    The rows are settled in passes that wait for no row: a row another transaction holds at that moment (a bulk
    worker's claim or record, a receipt) is settled by a later pass once it is let go — one statement waiting for
    it while holding thousands of others deadlocked against bulk workers. After CANCEL_PASSES_S the rest, if any,
    is the claim's to settle (it refuses a cancelled campaign's row). Returns rows suppressed; None when there is no
    such campaign."""
    first: int | None = None
    for attempt in range(CANCEL_ATTEMPTS):
        try:
            first = _cancel(tenant_id, campaign_id, engine, actor_ref=actor_ref, note=note)
            break
        except sa.exc.OperationalError as exc:
            if not is_deadlock(exc) or attempt == CANCEL_ATTEMPTS - 1:
                raise
    if first is None:
        return None
    settled = first
    deadline = time.monotonic() + CANCEL_PASSES_S
    while time.monotonic() < deadline:
        with UnitOfWork(engine) as uow:
            settled += len(settle_unsent_where(uow, campaign_id=campaign_id, reason="campaign_cancelled",
                                               refund_reason="refund: campaign cancelled", skip_locked=True))
            left = unleased_of_campaign(uow, campaign_id)
            uow.commit()
        if not left:
            break
        time.sleep(CANCEL_PASS_GAP_S)
    return settled


CANCEL_ATTEMPTS = 5
CANCEL_PASSES_S = 10.0  # how long a cancel keeps settling rows others held at its first pass
CANCEL_PASS_GAP_S = 0.05


def _cancel(tenant_id: int, campaign_id: int, engine: Engine | None, *, actor_ref: str, note: str) -> int | None:
    with UnitOfWork(engine) as uow:
        found = uow.execute(sql.CANCEL, {"t": tenant_id, "i": campaign_id}).first()
        if found is None:
            return None
        settled = settle_unsent_where(uow, campaign_id=campaign_id, reason="campaign_cancelled",
                                      refund_reason="refund: campaign cancelled", skip_locked=True)
        if found.status != found.was or settled:  # a second cancel, or one of a finished campaign: nothing to keep
            operator_actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="campaign cancel",
                                    target=f"campaign {campaign_id} ({len(settled)} owed messages suppressed)",
                                    note=note)
        uow.commit()
    return len(settled)

"""Campaigns on the bulk lane: a named segment (code, never a template) × one template × one channel.

The audience is code: each segment is a named, tested function returning the SQL condition over `recipients r`
(and the tenant) that selects who gets it. Fan-out writes the ledger in batches of multi-row `INSERT … SELECT`, each
row with its dedupe key (campaign + recipient + channel) through the ledger's "existing key means skip" rule, and
records its keyset position after each batch: a crash mid-fan-out resumes after the last batch and any overlap is
skipped, never duplicated. Progress is counted from the campaign's ledger rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.campaigns.segments import SEGMENTS
from domain.db import UnitOfWork
from domain.delivery.queue import JOB_ID_SQL, NOTIFY_OWED
from domain.ledger.recipients import PEOPLE_CHANNELS
from domain.ledger.write import SendRefused, check_template, dedupe_key, settle_unsent_where
from domain.settings import get_settings

LANE: Final[str] = "bulk"
BATCH: Final[int] = 5_000


def create(*, tenant_id: int, name: str, segment: str, template: str, channel: str, actor_ref: str,
           engine: Engine | None = None) -> int:
    if segment not in SEGMENTS:
        raise SendRefused("unknown_segment", f"no segment {segment!r}; segments are {', '.join(SEGMENTS)}")
    if channel not in PEOPLE_CHANNELS:
        raise SendRefused("unknown_channel", f"campaigns go by {', '.join(PEOPLE_CHANNELS)}, not {channel!r}")
    with UnitOfWork(engine) as uow:
        check_template(uow, template, channel)
        total = uow.execute(sa.text(
            f"SELECT count(*) FROM recipients r WHERE r.tenant_id = :t AND {SEGMENTS[segment](channel)}"),
            {"t": tenant_id, "channel": channel}).scalar_one()
        cid = uow.execute(sa.text(
            "INSERT INTO campaigns (tenant_id, name, segment, template, channel, status, total, ledgered, "
            "last_recipient_id, actor_ref, started_at) VALUES (:t, :n, :s, :tpl, :c, 'ledgering', :total, 0, 0, :a, "
            "now()) RETURNING id"),
            {"t": tenant_id, "n": name, "s": segment, "tpl": template, "c": channel, "total": total,
             "a": actor_ref}).scalar_one()
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
        c = uow.execute(sa.text(
            "SELECT id, tenant_id, name, segment, template, channel, status, last_recipient_id FROM campaigns "
            "WHERE id = :i FOR UPDATE"), {"i": campaign_id}).first()
        if c is None or c.status != "ledgering":
            return Batch(0, True)
        example = dedupe_key(c.tenant_id, c.channel, "{ref}", c.template, f"campaign-{c.id}")
        prefix, suffix = example.split("{ref}")
        picked = uow.execute(sa.text(
            f"""
            WITH picked AS (
              SELECT r.id, r.ref FROM recipients r
              WHERE r.tenant_id = :t AND r.id > :after AND {SEGMENTS[c.segment](c.channel)}
              ORDER BY r.id LIMIT :n
            ), ins AS (
              INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status,
                                         cost_cents, next_attempt_at, attempts, max_attempts, reserved_cents,
                                         campaign_id)
              SELECT :t, p.ref, CAST(:channel AS varchar), :lane, :tpl, CAST(:payload AS jsonb),
                     :prefix || p.ref || :suffix, 'QUEUED',
                     coalesce((SELECT price_cents FROM channel_prices WHERE tenant_id = :t
                               AND channel = CAST(:channel AS varchar)), 0),
                     now(), 0, :max, 0, :cid
              FROM picked p ORDER BY p.id
              ON CONFLICT (dedupe_key) DO NOTHING
              RETURNING id
            )
            SELECT (SELECT count(*) FROM ins) AS inserted, (SELECT max(id) FROM picked) AS last_id,
                   (SELECT count(*) FROM picked) AS picked
            """),
            {"t": c.tenant_id, "after": c.last_recipient_id, "n": batch, "channel": c.channel, "lane": LANE,
             "tpl": c.template, "payload": json.dumps({"headline": c.name, "campaign_id": c.id}), "prefix": prefix, "suffix": suffix,
             "max": get_settings().max_attempts, "cid": c.id}).one()
        uow.execute(sa.text(f"UPDATE notifications SET job_id = {JOB_ID_SQL} WHERE campaign_id = :c AND job_id IS NULL"),
                    {"c": c.id})
        done = picked.picked < batch
        uow.execute(sa.text(
            "UPDATE campaigns SET ledgered = ledgered + :k, last_recipient_id = coalesce(:last, last_recipient_id), "
            "status = CASE WHEN :done THEN 'running' ELSE status END WHERE id = :i"),
            {"k": picked.inserted, "last": picked.last_id, "done": done, "i": c.id})
        if picked.inserted:
            uow.execute(NOTIFY_OWED, {"lane": LANE})
        uow.commit()
    return Batch(int(picked.inserted), done)


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
        return [int(i) for i in uow.execute(sa.text(
            "SELECT id FROM campaigns WHERE status = 'ledgering' ORDER BY id")).scalars()]


def cancel(tenant_id: int, campaign_id: int, engine: Engine | None = None) -> int | None:
    """Stop the fan-out and suppress what is still owed (`campaign_cancelled`); a row a worker holds is left to
    that worker. Returns rows suppressed; None when there is no such campaign."""
    with UnitOfWork(engine) as uow:
        # A campaign whose fan-out is over and of which nothing is owed any more is done (views computes that
        # on read): cancelling it changes nothing.
        found = uow.execute(sa.text(
            "UPDATE campaigns c SET status = CASE WHEN c.status = 'ledgering' OR (c.status = 'running' AND EXISTS ("
            "  SELECT 1 FROM notifications n WHERE n.campaign_id = c.id AND n.status = 'QUEUED')) THEN 'cancelled' "
            "ELSE c.status END WHERE c.tenant_id = :t AND c.id = :i RETURNING c.id"),
            {"t": tenant_id, "i": campaign_id}).first()
        if found is None:
            return None
        settled = settle_unsent_where(uow, campaign_id=campaign_id, reason="campaign_cancelled",
                                      refund_reason="refund: campaign cancelled")
        uow.commit()
    return len(settled)

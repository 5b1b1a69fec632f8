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
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import metering, sql
from domain.audience import PEOPLE_CHANNELS, dedupe_key
from domain.db import UnitOfWork
from domain.ledger import SendRefused, check_template
from domain.queue import JOB_ID_SQL
from domain.settings import get_settings

LANE: Final[str] = "bulk"
BATCH: Final[int] = 5_000
CONTACT_COLUMN: Final[dict[str, str]] = {"email": "r.email", "sms": "r.phone", "whatsapp": "r.phone"}


def all_reachable(channel: str) -> str:
    """Everyone with a contact point for the channel who has not opted out of it."""
    return f"{CONTACT_COLUMN[channel]} IS NOT NULL AND NOT (:channel = ANY(r.opted_out_channels))"


def abandoned_after_credit_check(channel: str) -> str:
    """Reachable people whose loan journey stopped at the credit check: a lead of theirs is at `credit_check_done`
    and has no live nudge left (it was sent or ended)."""
    return (all_reachable(channel) + " AND EXISTS (SELECT 1 FROM leads l WHERE l.tenant_id = r.tenant_id "
            "AND l.recipient_ref = r.ref AND l.current_step = 'credit_check_done' AND NOT EXISTS ("
            "SELECT 1 FROM lead_notification_intents i WHERE i.lead_id = l.id AND i.status IN ('pending', 'scheduled')))")


SEGMENTS: Final[dict[str, Callable[[str], str]]] = {
    "all_reachable": all_reachable,
    "abandoned_after_credit_check": abandoned_after_credit_check,
}


def segment_refs(tenant_id: int, segment: str, channel: str, engine: Engine | None = None) -> list[str]:
    """Who a segment selects right now (for tests and previews)."""
    with UnitOfWork(engine) as uow:
        return [str(r) for r in uow.execute(sa.text(
            f"SELECT r.ref FROM recipients r WHERE r.tenant_id = :t AND {SEGMENTS[segment](channel)} ORDER BY r.id"),
            {"t": tenant_id, "channel": channel}).scalars()]


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
            uow.execute(sql.NOTIFY_OWED, {"lane": LANE})
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


def status(tenant_id: int, campaign_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        c = uow.execute(sa.text(
            "SELECT id, name, segment, template, channel, status, total, ledgered, created_at, started_at, "
            "finished_at FROM campaigns WHERE tenant_id = :t AND id = :i"), {"t": tenant_id, "i": campaign_id}).first()
        if c is None:
            return None
        counts = uow.execute(sa.text(
            "SELECT count(*) FILTER (WHERE status = 'QUEUED' AND reason_detail IS NULL) AS queued, "
            "count(*) FILTER (WHERE status = 'QUEUED' AND reason_detail IS NOT NULL) AS deferred, "
            "count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED')) AS sent, "
            "count(*) FILTER (WHERE status = 'DELIVERED') AS delivered, "
            "count(*) FILTER (WHERE status = 'FAILED') AS failed, "
            "max(coalesce(settled_at, sent_at)) AS last_settled "
            "FROM notifications WHERE campaign_id = :i"), {"i": campaign_id}).one()
        suppressed = {str(r.reason): int(r.n) for r in uow.execute(sa.text(
            "SELECT suppressed_reason AS reason, count(*) AS n FROM notifications WHERE campaign_id = :i "
            "AND status = 'SUPPRESSED' GROUP BY suppressed_reason ORDER BY 2 DESC"), {"i": campaign_id})}
        finished = c.finished_at
        owed = counts.queued + counts.deferred
        if finished is None and c.status in ("running", "cancelled") and owed == 0:
            finished = counts.last_settled or datetime.now(c.created_at.tzinfo)
            uow.execute(sa.text("UPDATE campaigns SET finished_at = :f, status = CASE WHEN status = 'running' "
                                "THEN 'done' ELSE status END WHERE id = :i"), {"f": finished, "i": campaign_id})
            uow.commit()
    return {"campaign_id": c.id, "name": c.name, "segment": c.segment, "template": c.template, "channel": c.channel,
            "status": "done" if finished and c.status == "running" else c.status, "total": c.total,
            "ledgered": c.ledgered, "queued": counts.queued, "sent": counts.sent, "delivered": counts.delivered,
            "deferred": counts.deferred, "suppressed": suppressed, "failed": counts.failed,
            "started_at": c.started_at, "finished_at": finished}


def list_campaigns(tenant_id: int, limit: int = 50, engine: Engine | None = None) -> list[dict[str, Any]]:
    with UnitOfWork(engine) as uow:
        ids = [int(i) for i in uow.execute(sa.text(
            "SELECT id FROM campaigns WHERE tenant_id = :t ORDER BY id DESC LIMIT :l"),
            {"t": tenant_id, "l": limit}).scalars()]
    return [s for i in ids if (s := status(tenant_id, i, engine)) is not None]


def cancel(tenant_id: int, campaign_id: int, engine: Engine | None = None) -> int | None:
    """Stop the fan-out and suppress what is still owed (`campaign_cancelled`); a row a worker holds is left to
    that worker. Returns rows suppressed; None when there is no such campaign."""
    with UnitOfWork(engine) as uow:
        found = uow.execute(sa.text(
            "UPDATE campaigns SET status = CASE WHEN status IN ('ledgering', 'running') THEN 'cancelled' ELSE status "
            "END WHERE tenant_id = :t AND id = :i RETURNING id"), {"t": tenant_id, "i": campaign_id}).first()
        if found is None:
            return None
        rows = uow.execute(sa.text(
            "UPDATE notifications SET status = 'SUPPRESSED', suppressed_reason = 'campaign_cancelled', "
            "settled_at = now() WHERE campaign_id = :i AND status = 'QUEUED' "
            "AND (leased_until IS NULL OR leased_until < now()) RETURNING id, reserved_cents > 0 OR cap_day IS NOT NULL "
            "AS holds"), {"i": campaign_id}).all()
        for r in rows:
            if r.holds:  # only rows a claim already charged (a retry in progress) hold anything to give back
                metering.release(uow, r.id, "refund: campaign cancelled")
        uow.commit()
    return len(rows)

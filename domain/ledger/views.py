"""The ledger's read models: the ledger page with its totals, one message with its attempts, one recipient's "why
didn't they get it?", and the audit timeline. Tenant-scoped: every query takes the tenant from the authenticated
principal, never from input."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts, like_escape
from domain.ledger import sql_reads
from domain.ledger.reasons import effect_text, ledger_reason, message_answer

# The ledger's read shape of a row: public, so every capability's views read rows the same way.
from domain.ledger.sql_reads import NOTIFICATION_COLUMNS as NOTIFICATION_COLUMNS


@dataclass(frozen=True)
class LedgerFilter:
    channel: str | None = None
    status: str | None = None
    recipient: str | None = None
    lane: str | None = None
    since_hours: int | None = None
    limit: int = 100
    # Keyset paging, newest first: rows older than `before_id`, or the page just newer than `after_id`.
    before_id: int | None = None
    after_id: int | None = None


def _ledger_params(tenant_id: int, f: LedgerFilter) -> dict[str, Any]:
    return {"t": tenant_id, "c": f.channel, "s": f.status, "h": f.since_hours,
            "r": f"%{like_escape(f.recipient)}%" if f.recipient else None, "l": f.lane, "lim": f.limit,
            "b": f.before_id, "a": f.after_id}


def ledger_rows(tenant_id: int, f: LedgerFilter, engine: Engine | None = None, *,
                money: bool = False) -> tuple[list[dict[str, Any]], bool]:
    """One keyset page of the filtered ledger, newest first, and whether there is more beyond it (older rows for a
    `before_id` or first page, newer rows for an `after_id` page). `money`: with sql_reads.MONEY_COLUMNS (the ledger
    page)."""
    p = {**_ledger_params(tenant_id, f), "lim": f.limit + 1}
    newer = f.after_id is not None
    with UnitOfWork(engine) as uow:
        if money:
            page = sql_reads.LEDGER_MONEY_PAGE_NEWER if newer else sql_reads.LEDGER_MONEY_PAGE_OLDER
        else:
            page = sql_reads.LEDGER_PAGE_NEWER if newer else sql_reads.LEDGER_PAGE_OLDER
        rows = as_dicts(uow.execute(page, p))
    more = len(rows) > f.limit
    rows = rows[:f.limit]
    return (rows[::-1] if newer else rows), more


def ledger(tenant_id: int, f: LedgerFilter, engine: Engine | None = None) -> dict[str, Any]:
    """Rows, totals and per-channel figures. Money: charged (held by SENT/DELIVERED rows), reserved (held by QUEUED
    rows) and refunded, apart. Delivery rate: delivered over what was attempted to the end (SENT, DELIVERED,
    FAILED); suppressed rows were never attempted and are counted apart."""
    p = _ledger_params(tenant_id, f)
    rows, more = ledger_rows(tenant_id, f, engine, money=True)
    with UnitOfWork(engine) as uow:
        totals = uow.execute(sql_reads.LEDGER_TOTALS, p).one()
        per_channel = as_dicts(uow.execute(sql_reads.LEDGER_BY_CHANNEL, p))
    t = dict(totals._mapping)
    t["delivery_rate"] = (t["delivered"] / t["attempted_final"]) if t["attempted_final"] else None
    for ch in per_channel:
        ch["delivery_rate"] = (ch["delivered"] / ch["attempted_final"]) if ch["attempted_final"] else None
    return {"rows": rows, "more": more, "totals": t, "channels": per_channel}


def audit_timeline(tenant_id: int, *, refs: Sequence[str] = (), message_ids: Sequence[int] = (),
                   order_id: int | None = None, event_id: uuid.UUID | None = None,
                   engine: Engine | None = None) -> list[dict[str, Any]]:
    """One timeline across events, ledger rows, attempts, receiver effects and receipts of what a query named (the
    search room reads the query: `domain.support.search.audit_named`): recipients' messages by their refs, messages
    by id, an order's messages and its own events, an event and its messages. Suppression reasons come back in plain
    words. One tenant's rows only."""
    params: dict[str, Any] = {"t": tenant_id, "refs": list(refs), "ids": list(message_ids), "ev": event_id,
                              "oid": order_id}
    with UnitOfWork(engine) as uow:
        notes = as_dicts(uow.execute(sql_reads.AUDIT_NOTIFICATIONS, params))
        ids = [n["id"] for n in notes]
        events = {n["event_id"] for n in notes if n["event_id"]} | ({event_id} if event_id else set())
        if order_id is not None:
            events |= {r.event_id for r in uow.execute(sql_reads.AUDIT_ORDER_EVENTS, params)}
        attempts = as_dicts(uow.execute(sql_reads.AUDIT_ATTEMPTS, {"ids": ids})) if ids else []
        evs = as_dicts(uow.execute(sql_reads.AUDIT_EVENTS, {"t": tenant_id, "e": list(events)})) if events else []
        provider_refs = [n["provider_reference"] for n in notes if n["provider_reference"]]
        receipts = as_dicts(uow.execute(sql_reads.AUDIT_RECEIPTS, {"r": provider_refs})) if provider_refs else []
    timeline: list[dict[str, Any]] = []
    for e in evs:
        timeline.append({"at": e["occurred_at"], "kind": "event", "ref": str(e["event_id"]),
                         "text": f"{e['event_type']} order {e['aggregate_id']} revision {e['aggregate_revision']} "
                                 f"by {e['actor_ref']} (request {e['request_id']})"})
    by_id = {n["id"]: n for n in notes}
    for n in notes:
        line = f"#{n['id']} {n['channel']} to {n['recipient']} on lane {n['lane']}: {n['status']}"
        reason = ledger_reason(n)
        if reason:
            line += " — " + reason
        timeline.append({"at": n["created_at"], "kind": "ledger", "ref": str(n["event_id"] or ""), "text": line,
                         "message_id": n["id"]})
    for a in attempts:
        n = by_id[a["notification_id"]]
        extra = f" ({a['error_class']})" if a["error_class"] else ""
        lat = f" in {a['latency_ms']:.0f} ms" if a["latency_ms"] is not None else ""
        timeline.append({"at": a["started_at"], "kind": "attempt", "ref": str(n["event_id"] or ""),
                         "text": f"#{n['id']} attempt {a['attempt_no']} by {a['worker']}: {a['outcome']}{extra}{lat}",
                         "message_id": n["id"]})
    for n in notes:
        if n["effect_ref"] and n["sent_at"]:
            timeline.append({"at": n["sent_at"], "kind": "effect", "ref": str(n["event_id"] or ""),
                             "text": effect_text(n["effect_ref"], n["last_outcome"])})
    for r in receipts:
        timeline.append({"at": r["received_at"], "kind": "receipt", "ref": r["provider_reference"],
                         "text": f"{r['provider']} receipt for {r['provider_reference']}: {r['outcome']}"})
    timeline.sort(key=lambda x: x["at"])
    return timeline


def notification_detail(tenant_id: int, notification_id: int, now: datetime,
                        engine: Engine | None = None) -> dict[str, Any] | None:
    """One message: the row, every attempt (time, outcome, HTTP status, latency, response excerpt), the next retry,
    provider reference, receipt and cost."""
    with UnitOfWork(engine) as uow:
        n = uow.execute(sql_reads.MESSAGE, {"t": tenant_id, "i": notification_id}).first()
        if n is None:
            return None
        attempts = as_dicts(uow.execute(sql_reads.MESSAGE_ATTEMPTS, {"i": notification_id}))
        receipt = uow.execute(sql_reads.MESSAGE_RECEIPT, {"r": n.provider_reference, "c": n.channel}).first() \
            if n.provider_reference else None
    out = dict(n._mapping)
    out["notification_id"] = out["id"]
    out["attempt_log"] = attempts
    out["next_retry_at"] = out["next_attempt_at"] if out["status"] == "QUEUED" else None
    out["receipt"] = dict(receipt._mapping) if receipt else None
    out["charged_cents"] = out["reserved_cents"]
    out["answer"] = message_answer(out, now)
    return out


def recipient_messages(tenant_id: int, recipient_id: int, now: datetime, limit: int = 100, before_id: int | None = None,
                       engine: Engine | None = None) -> dict[str, Any] | None:
    """"Why didn't they get it?": every message to one recipient with its answer in plain words, and on top the
    cross-channel answers — heard from us today at all, how many this week, which channel actually reached them."""
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql_reads.RECIPIENT_HEADER, {"t": tenant_id, "i": recipient_id}).first()
        if r is None:
            return None
        rows = as_dicts(uow.execute(sql_reads.RECIPIENT_MESSAGES, {"t": tenant_id, "ref": r.ref, "b": before_id,
                                                              "l": limit + 1}))
        more, rows = len(rows) > limit, rows[:limit]
        day_start = now.astimezone(ZoneInfo(r.timezone)).replace(hour=0, minute=0, second=0, microsecond=0)
        s = uow.execute(sql_reads.RECIPIENT_REACH, {"t": tenant_id, "ref": r.ref, "day": day_start, "now": now}).one()
    for m in rows:
        m["answer"] = message_answer(m, now)
    return {"recipient_id": r.id, "ref": r.ref, "display_name": r.display_name, "timezone": r.timezone,
            "heard_from_us_today": s.today > 0, "sent_today": int(s.today), "sent_this_week": int(s.week),
            "reached_by": list(s.reached or []), "messages": rows,
            "next_cursor": str(rows[-1]["id"]) if more and rows else None}

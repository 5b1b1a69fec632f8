"""Find anything by anything: one query → the recipients, messages, orders, events, leads (by their ref or their
advisor's) and campaigns (by id or name) it names, each with its
answer in plain words (a recipient's cross-channel answer, a message's own answer). Tenant-scoped: another tenant's
row is exactly no row."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts, like_escape
from domain.delivery.state import with_states
from domain.ledger.reasons import CHANNEL_NAME, message_answer
from domain.support import sql
from domain.support.ledger import recipient_messages
from domain.support.query import Probes, read_query

MAX_RECIPIENTS, MAX_MESSAGES, MAX_LEADS, MAX_CAMPAIGNS = 10, 20, 10, 10


def _recipient_hit(tenant_id: int, r: dict[str, Any], now: datetime, leads: list[dict[str, Any]],
                   engine: Engine | None) -> dict[str, Any]:
    why = recipient_messages(tenant_id, r["id"], now, 3, engine=engine) or {}
    reached = ", ".join(CHANNEL_NAME.get(c, c) for c in why.get("reached_by", [])) or "no channel yet"
    return {
        "kind": "recipient", "id": r["id"], "ref": r["ref"], "title": f"{r['display_name']} ({r['ref']})",
        "matched_by": r["matched_by"], "href": f"/recipients/{r['id']}",
        "heard_from_us_today": bool(why.get("heard_from_us_today")), "sent_this_week": why.get("sent_this_week", 0),
        "reached_by": why.get("reached_by", []),
        "answer": f"Heard from us today: {'yes' if why.get('heard_from_us_today') else 'no'} · sent this week: "
                  f"{why.get('sent_this_week', 0)} · reached by: {reached}",
        "latest": [{"id": m["id"], "channel": m["channel"], "status": m["status"], "answer": m["answer"],
                    "href": f"/messages/{m['id']}"} for m in why.get("messages", [])],
        "leads": [{"id": ld["id"], "step": ld["current_step"], "href": f"/journeys/{ld['id']}"}
                  for ld in leads if ld["recipient_ref"] == r["ref"]],
    }


def _message_hit(n: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {"kind": "message", "id": n["id"], "title": f"#{n['id']} {n['channel']} {n['template']} to {n['recipient']}",
            "status": n["status"], "channel": n["channel"], "recipient": n["recipient"], "job_id": n["job_id"],
            "matched_by": n["matched_by"], "answer": n.get("answer") or message_answer(n, now),
            "href": f"/messages/{n['id']}",
            "created_at": n["created_at"]}


def search(tenant_id: int, raw: str, now: datetime, engine: Engine | None = None) -> dict[str, Any]:
    """`QueryRefused` for a query that cannot be one (nothing runs); else `{kinds, items}` — `items` empty when
    nothing of this tenant matches."""
    p: Probes = read_query(raw)
    params = {"t": tenant_id, "text": p.text, "email": p.email, "phone": p.phone_digits, "name": p.name,
              "name_like": f"%{like_escape(p.name)}%", "mid": p.message_id, "ev": p.event_id, "oid": p.order_id}
    with UnitOfWork(engine) as uow:
        people = as_dicts(uow.execute(sql.RECIPIENTS, {**params, "l": MAX_RECIPIENTS})) \
            if (p.text or p.email or p.phone_digits or p.name) else []
        messages = as_dicts(uow.execute(sql.MESSAGES, {**params, "l": MAX_MESSAGES})) \
            if (p.message_id or p.text or p.event_id) else []
        order = uow.execute(sql.ORDER, params).first() if p.order_id else None
        event = uow.execute(sql.EVENT, params).first() if p.event_id else None
        leads = as_dicts(uow.execute(sql.LEADS_OF, {"t": tenant_id, "refs": [r["ref"] for r in people]})) \
            if people else []
        lead_hits = as_dicts(uow.execute(sql.LEADS, {**params, "l": MAX_LEADS})) if p.text else []
        campaigns = as_dicts(uow.execute(sql.CAMPAIGNS, {**params, "cid": p.order_id, "l": MAX_CAMPAIGNS})) \
            if (p.order_id or p.name) else []
    items: list[dict[str, Any]] = [_recipient_hit(tenant_id, r, now, leads, engine) for r in people]
    if order is not None:
        items.append({"kind": "order", "id": order.id, "title": f"order {order.id}", "status": order.status,
                      "matched_by": "order number", "href": f"/orders/{order.id}",
                      "answer": f"{order.status} at revision {order.revision}, customer {order.customer_ref}; "
                                f"{order.messages} message(s)"})
    if event is not None:
        items.append({"kind": "event", "id": str(event.event_id), "title": f"event {event.event_type}",
                      "status": event.event_type, "matched_by": "event id", "href": f"/audit?q={event.event_id}",
                      "answer": f"{event.event_type} on {event.aggregate_type} {event.aggregate_id} revision "
                                f"{event.aggregate_revision} by {event.actor_ref} at {event.occurred_at:%Y-%m-%d %H:%M:%S} UTC"})
    items.extend(_message_hit(n, now) for n in with_states(messages, now, tenant_id, engine))
    items.extend({"kind": "lead", "id": ld["id"], "title": f"lead #{ld['id']} ({ld['recipient_ref']})",
                  "status": ld["current_step"] or "not started", "matched_by": ld["matched_by"],
                  "href": f"/journeys/{ld['id']}",
                  "answer": f"furthest step: {ld['current_step'] or 'not started'}; advisor "
                            f"{ld['advisor_ref'] or 'none'}"} for ld in lead_hits)
    items.extend({"kind": "campaign", "id": c["id"], "title": f"campaign #{c['id']} {c['name']}",
                  "status": c["status"], "matched_by": c["matched_by"], "href": f"/campaigns/{c['id']}",
                  "answer": f"{c['segment']} × {c['template']} by {c['channel']} to {c['total']:,} people "
                            f"({c['status']})"} for c in campaigns)
    return {"kinds": p.kinds, "items": items}

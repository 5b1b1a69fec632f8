"""Find anything by anything: one query → the recipients, messages, orders, events, leads (by their ref or their
advisor's) and campaigns (by id or name) it names, each with its
answer in plain words (a recipient's cross-channel answer, a message's own answer). Tenant-scoped: another tenant's
row is exactly no row. The one reading of a query (`find_named`) serves every door that finds by what the pages
print: search, /audit (`audit_named`) and `outbox why` (`recipients_named`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts, like_escape
from domain.delivery.state import with_states
from domain.ledger.reasons import CHANNEL_NAME, message_answer
from domain.ledger.views import audit_timeline
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


@dataclass(frozen=True)
class Named:
    """What one query names in one tenant: the search room's one reading of it (`read_query`), run once, for every
    door that finds by what the pages print — search, /audit, `outbox why`. Another tenant's row is no row."""

    probes: Probes
    recipients: list[dict[str, Any]]  # id, ref, display_name, matched_by
    messages: list[dict[str, Any]]  # the ledger's read shape, with matched_by
    order: dict[str, Any] | None
    event: dict[str, Any] | None
    leads: list[dict[str, Any]]  # by the lead's or its advisor's ref
    campaigns: list[dict[str, Any]]
    recipients_leads: list[dict[str, Any]]  # the leads of the recipients found

    @property
    def kinds(self) -> list[str]:
        return self.probes.kinds


def find_named(tenant_id: int, raw: str, engine: Engine | None = None) -> Named:
    """`QueryRefused` for a query that cannot be one (nothing runs); else every row of this tenant it names."""
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
    return Named(p, people, messages, dict(order._mapping) if order is not None else None,
                 dict(event._mapping) if event is not None else None, lead_hits, campaigns, leads)


def recipients_named(tenant_id: int, raw: str, engine: Engine | None = None) -> list[tuple[int, str]]:
    """(recipient id, what named them) of everyone a query leads to in this tenant: found themselves (ref, phone,
    email, name), or as the one a message found was for (message id, `#id`, job id, provider reference, event id),
    the customer of an order found, or the person of a lead found — `outbox why` and /audit's who-callout take what
    search takes. `QueryRefused` as `read_query`."""
    return _people_of(tenant_id, find_named(tenant_id, raw, engine), engine)


def _people_of(tenant_id: int, found: Named, engine: Engine | None) -> list[tuple[int, str]]:
    named: dict[str, str] = {}
    for r in found.recipients:
        named.setdefault(r["ref"], str(r["matched_by"]))
    for m in found.messages:
        named.setdefault(m["recipient"], f"recipient of message #{m['id']} ({m['matched_by']})")
    if found.order is not None:
        named.setdefault(found.order["customer_ref"], f"customer of order {found.order['id']}")
    for ld in found.leads:
        named.setdefault(ld["recipient_ref"], f"lead #{ld['id']} ({ld['matched_by']})")
    if not named:
        return []
    with UnitOfWork(engine) as uow:
        ids = {str(r.ref): int(r.id) for r in uow.execute(sql.RECIPIENTS_BY_REFS,
                                                          {"t": tenant_id, "refs": list(named)})}
    return [(ids[ref], why) for ref, why in named.items() if ref in ids]


def audit_named(tenant_id: int, raw: str, engine: Engine | None = None) -> dict[str, Any]:
    """/audit's answer for one query, read as search reads it: `{kinds, timeline, recipients}` — the timeline of
    everything it names (recipients' messages, messages, an order's messages and events, an event and its messages)
    and the recipients it leads to (for the who-callout). `QueryRefused` as `read_query`; another tenant's rows are
    no rows."""
    found = find_named(tenant_id, raw, engine)
    timeline = audit_timeline(
        tenant_id, refs=[r["ref"] for r in found.recipients] + [ld["recipient_ref"] for ld in found.leads],
        message_ids=[m["id"] for m in found.messages],
        order_id=found.order["id"] if found.order is not None else None,
        event_id=found.event["event_id"] if found.event is not None else None, engine=engine) \
        if (found.recipients or found.leads or found.messages or found.order or found.event) else []
    if found.order is not None:  # the order itself, even before any change of it sent a message
        o = found.order
        timeline.insert(0, {"at": o["updated_at"], "kind": "order", "ref": str(o["id"]),
                            "text": f"order {o['id']}: {o['status']} at revision {o['revision']}, customer "
                                    f"{o['customer_ref']}; {o['messages']} message(s)"})
    return {"kinds": found.kinds, "timeline": timeline, "recipients": _people_of(tenant_id, found, engine)}


def search(tenant_id: int, raw: str, now: datetime, engine: Engine | None = None) -> dict[str, Any]:
    """`QueryRefused` for a query that cannot be one (nothing runs); else `{kinds, items}` — `items` empty when
    nothing of this tenant matches."""
    found = find_named(tenant_id, raw, engine)
    people, leads, lead_hits, campaigns = found.recipients, found.recipients_leads, found.leads, found.campaigns
    order, event = found.order, found.event
    items: list[dict[str, Any]] = [_recipient_hit(tenant_id, r, now, leads, engine) for r in people]
    if order is not None:
        items.append({"kind": "order", "id": order["id"], "title": f"order {order['id']}",
                      "status": order["status"], "matched_by": "order number", "href": f"/orders/{order['id']}",
                      "answer": f"{order['status']} at revision {order['revision']}, customer "
                                f"{order['customer_ref']}; {order['messages']} message(s)"})
    if event is not None:
        items.append({"kind": "event", "id": str(event["event_id"]), "title": f"event {event['event_type']}",
                      "status": event["event_type"], "matched_by": "event id", "href": f"/audit?q={event['event_id']}",
                      "answer": f"{event['event_type']} on {event['aggregate_type']} {event['aggregate_id']} revision "
                                f"{event['aggregate_revision']} by {event['actor_ref']} at "
                                f"{event['occurred_at']:%Y-%m-%d %H:%M:%S} UTC"})
    items.extend(_message_hit(n, now) for n in with_states(found.messages, now, tenant_id, engine))
    items.extend({"kind": "lead", "id": ld["id"], "title": f"lead #{ld['id']} ({ld['recipient_ref']})",
                  "status": ld["current_step"] or "not started", "matched_by": ld["matched_by"],
                  "href": f"/journeys/{ld['id']}",
                  "answer": f"furthest step: {ld['current_step'] or 'not started'}; advisor "
                            f"{ld['advisor_ref'] or 'none'}"} for ld in lead_hits)
    items.extend({"kind": "campaign", "id": c["id"], "title": f"campaign #{c['id']} {c['name']}",
                  "status": c["status"], "matched_by": c["matched_by"], "href": f"/campaigns/{c['id']}",
                  "answer": f"{c['segment']} × {c['template']} by {c['channel']} to {c['total']:,} people "
                            f"({c['status']})"} for c in campaigns)
    return {"kinds": found.kinds, "items": items}

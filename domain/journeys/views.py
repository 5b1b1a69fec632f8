"""Lead read models: the leads list and one lead's honest timeline."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts
from domain.ledger.reasons import intent_why
from domain.ledger.views import NOTIFICATION_COLUMNS


def list_leads(tenant_id: int, limit: int = 200, engine: Engine | None = None) -> list[dict[str, Any]]:
    """The first `limit` leads (a bounded list: the API reads one lead at a time)."""
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sa.text(
            "SELECT l.id, l.recipient_ref, l.advisor_ref, l.current_step, i.step AS live_step, "
            "i.status AS live_status, i.scheduled_for AS live_scheduled_for, "
            "(SELECT count(*) FROM lead_notification_intents h WHERE h.lead_id = l.id) AS intents "
            "FROM leads l LEFT JOIN lead_notification_intents i ON i.lead_id = l.id "
            "AND i.status IN ('pending', 'scheduled') WHERE l.tenant_id = :t ORDER BY l.id LIMIT :lim"),
            {"t": tenant_id, "lim": limit}))


def lead_detail(tenant_id: int, lead_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    """The honest lead view: today's fields, the one live intent (or null), every intent with its final status and
    why, the events received with their decisions, and the messages each intent produced."""
    with UnitOfWork(engine) as uow:
        lead = uow.execute(sa.text(
            "SELECT id, recipient_ref, advisor_ref, current_step, last_step_at FROM leads "
            "WHERE tenant_id = :t AND id = :l"), {"t": tenant_id, "l": lead_id}).first()
        if lead is None:
            return None
        intents = as_dicts(uow.execute(sa.text(
            "SELECT id, step, status, scheduled_for, final_reason, created_at, updated_at "
            "FROM lead_notification_intents WHERE lead_id = :l ORDER BY id"), {"l": lead_id}))
        notes = as_dicts(uow.execute(sa.text(
            f"SELECT {NOTIFICATION_COLUMNS}, n.intent_id FROM notifications n WHERE n.tenant_id = :t AND "
            "(n.intent_id IN (SELECT id FROM lead_notification_intents WHERE lead_id = :l) "
            " OR n.dedupe_key LIKE :lifecycle) ORDER BY n.id"),
            {"t": tenant_id, "l": lead_id, "lifecycle": f"%:lead-{lead_id}-%"}))
        events = as_dicts(uow.execute(sa.text(
            "SELECT event_id, event, occurred_at, received_at, outcome, answer->>'reason' AS reason "
            "FROM lead_events WHERE lead_id = :l ORDER BY id DESC LIMIT 200"), {"l": lead_id}))
    out = dict(lead._mapping)
    for i in intents:
        i["why"] = intent_why(i)
    out["intents"], out["notifications"], out["events"] = intents, notes, events
    out["live_intent"] = next((i for i in intents if i["status"] in ("pending", "scheduled")), None)
    out["history"] = [{"intent_id": i["id"], "step": i["step"], "status": i["status"], "why": i["why"]}
                      for i in intents]
    return out

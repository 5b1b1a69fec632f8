"""Lead read models: the leads list and one lead's honest timeline."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts, like_escape
from domain.journeys import sql
from domain.ledger.reasons import intent_why


def list_leads(tenant_id: int, limit: int = 200, before: int | None = None, after: int | None = None,
               query: str = "", step: str | None = None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Newest first, a keyset page (`before`/`after` a lead id); `query` matches part of the lead's or advisor's
    ref, `step` the furthest step ('none': not started)."""
    like = "%" + like_escape(query) + "%" if query else None
    with UnitOfWork(engine) as uow:
        return as_dicts(uow.execute(sql.LIST_LEADS, {"t": tenant_id, "lim": limit, "b": before, "a": after,
                                                     "q": like, "step": step}))


def lead_detail(tenant_id: int, lead_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    """The honest lead view: today's fields, the one live intent (or null), every intent with its final status and
    why, the events received with their decisions, and the messages each intent produced."""
    with UnitOfWork(engine) as uow:
        lead = uow.execute(sql.READ_LEAD, {"t": tenant_id, "l": lead_id}).first()
        if lead is None:
            return None
        intents = as_dicts(uow.execute(sql.LEAD_INTENTS, {"l": lead_id}))
        notes = as_dicts(uow.execute(sql.LEAD_MESSAGES, {"t": tenant_id, "l": lead_id,
                                                         "lifecycle": f"%:lead-{lead_id}-%"}))
        events = as_dicts(uow.execute(sql.LEAD_EVENTS, {"l": lead_id}))
    out = dict(lead._mapping)
    for i in intents:
        i["why"] = intent_why(i)
    out["intents"], out["notifications"], out["events"] = intents, notes, events
    out["live_intent"] = next((i for i in intents if i["status"] in ("pending", "scheduled")), None)
    out["history"] = [{"intent_id": i["id"], "step": i["step"], "status": i["status"], "why": i["why"]}
                      for i in intents]
    return out

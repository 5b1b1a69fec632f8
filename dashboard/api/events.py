"""Events: the immutable envelope of one committed fact, with the ledger rows it produced."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter

from dashboard.api.deps import Auth, tenant_row
from domain import queries

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.get("/{event_id}")
async def get_event(event_id: uuid.UUID, p: Auth) -> dict[str, Any]:
    return await tenant_row(queries.get_event, p.tenant_id, event_id)

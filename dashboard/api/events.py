"""Events: the immutable envelope of one committed fact, with the ledger rows it produced."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path

from dashboard.api.deps import Auth, tenant_row
from dashboard.api.errors import ApiError
from domain.orders import views as order_views

router = APIRouter(prefix="/api/v1/events", tags=["events"])


@router.get("/{event_id}")
async def get_event(event_id: Annotated[str, Path(max_length=64, description="an event's UUID")],
                    p: Auth) -> dict[str, Any]:
    """Something that is not a UUID names no event: 404, exactly like a missing one."""
    try:
        eid = uuid.UUID(event_id)
    except ValueError:
        raise ApiError(404, "not_found") from None
    return await tenant_row(order_views.get_event, p.tenant_id, eid)

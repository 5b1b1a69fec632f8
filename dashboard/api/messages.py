"""Messages: the ledger as a keyset-paged list (`?limit=&cursor=` → `{items, next_cursor}`), one message with
everything about it, and a filtered CSV export."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from dashboard.api.deps import Auth, Cursor, Id, tenant_row
from dashboard.api.errors import ApiError
from domain.delivery.queue import LANES
from domain.ledger import views as ledger_views
from domain.support.export import ledger_csv_lines
from domain.support.message import archived, message_page

router = APIRouter(prefix="/api/v1/messages", tags=["support"])

Channel = Literal["webhook", "email", "sms", "whatsapp"]
Status = Literal["QUEUED", "SENT", "DELIVERED", "FAILED", "SUPPRESSED"]
Lane = Annotated[str, Query(json_schema_extra={"enum": list(LANES)}, pattern="^(" + "|".join(LANES) + ")$")]
Recipient = Annotated[str, Query(min_length=1, max_length=64, description="part of a recipient ref")]
Hours = Annotated[int, Query(ge=1, le=24 * 366, description="only messages created in the last N hours")]


def _filter(channel: Channel | None, status: Status | None, lane: str | None, recipient: str | None,
            since_hours: int | None, limit: int = 100, before: int | None = None) -> ledger_views.LedgerFilter:
    return ledger_views.LedgerFilter(channel=channel, status=status, lane=lane, recipient=recipient,
                                     since_hours=since_hours, limit=limit, before_id=before)


@router.get("")
async def list_messages(p: Auth, limit: Annotated[int, Query(ge=1, le=500)] = 100, cursor: Cursor = None,
                        channel: Channel | None = None, status: Status | None = None, lane: Lane | None = None,
                        recipient: Recipient | None = None, since_hours: Hours | None = None) -> dict[str, Any]:
    """Newest first. `next_cursor` (null on the last page) fetches the next, older page."""
    f = _filter(channel, status, lane, recipient, since_hours, limit, cursor)
    rows, more = await asyncio.to_thread(ledger_views.ledger_rows, p.tenant_id, f)
    return {"items": rows, "next_cursor": str(rows[-1]["id"]) if more and rows else None}


@router.get("/export.csv", response_class=StreamingResponse,
            responses={200: {"content": {"text/csv": {}}, "description": "the filtered ledger, newest first"}})
async def export(p: Auth, channel: Channel | None = None, status: Status | None = None, lane: Lane | None = None,
                 recipient: Recipient | None = None, since_hours: Hours | None = None) -> StreamingResponse:
    """The filtered ledger as CSV (recipients by ref; no phone or email)."""
    f = _filter(channel, status, lane, recipient, since_hours)
    lines = await asyncio.to_thread(lambda: list(ledger_csv_lines(p.tenant_id, f)))
    return StreamingResponse(iter(lines), media_type="text/csv",
                             headers={"Content-Disposition": 'attachment; filename="ledger.csv"'})


@router.get("/{notification_id}", responses={410: {"description": "its month was archived (`archived`): when, "
                                                                  "and the file it is in"}})
async def get(notification_id: Id, p: Auth) -> dict[str, Any]:
    """Envelope (redacted), every attempt (time, outcome, HTTP status, latency, response excerpt, next retry), the
    receipt, the charge and any refund, and the reason in plain words. A message whose month was archived answers
    410 with where it went."""
    def page(t: int, i: int) -> dict[str, Any] | None:
        got = message_page(t, i, datetime.now(UTC))
        if got is None and (gone := archived(t, i)) is not None:
            raise ApiError(410, "archived", **gone)
        return got

    return await tenant_row(page, p.tenant_id, notification_id)

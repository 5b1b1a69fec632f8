"""The app factory: it only assembles routers, middleware and error handlers.

OpenAPI at /api/openapi.json, docs at /api/docs (kept under /api so no Reflex page is hidden by a route).
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from dashboard.api import (
    balance,
    campaigns,
    errors,
    events,
    health,
    leads,
    notifications,
    orders,
    otp,
    receipts,
    recipients,
)
from dashboard.limits import BodyLimit
from domain.settings import get_settings

ROUTERS: tuple[APIRouter, ...] = (orders.router, events.router, leads.router, recipients.router, notifications.router,
                                  otp.router, campaigns.router, balance.router, receipts.router, health.router)

# Unmatched /api/... would fall through to Reflex's HTML 404: answer JSON instead. Registered LAST.
not_found = APIRouter()


@not_found.api_route("/api/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
async def api_not_found(rest: str) -> JSONResponse:
    return JSONResponse({"error": "not_found", "path": f"/api/{rest}"}, status_code=404)


def build_api() -> FastAPI:
    docs = bool(get_settings().api_docs)  # production: off unless OUTBOX_API_DOCS=1
    api = FastAPI(title="Outbox API", version="1.0", openapi_url="/api/openapi.json" if docs else None,
                  docs_url="/api/docs" if docs else None, redoc_url=None)
    api.add_middleware(BodyLimit, max_bytes=get_settings().max_body_bytes)
    errors.install(api)
    for router in (*ROUTERS, not_found):
        api.include_router(router)
    return api

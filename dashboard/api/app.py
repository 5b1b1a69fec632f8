"""The app factory: it only assembles routers, middleware and error handlers.

OpenAPI at /api/openapi.json, docs at /api/docs (kept under /api so no Reflex page is hidden by a route).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from dashboard.api import (
    balance,
    campaigns,
    endpoints,
    errors,
    events,
    health,
    leads,
    messages,
    notifications,
    orders,
    otp,
    receipts,
    recipients,
    search,
    session,
)
from dashboard.api import docs as api_docs
from dashboard.api.deps import authenticate, needs_key
from dashboard.api.fields import publish_text_rules
from dashboard.api.guard import ApiKeyGate, HostileInput, RequestContext
from dashboard.api.idempotency import Idempotency
from dashboard.api.idempotency import publish as publish_idempotency
from dashboard.limits import BodyLimit
from domain.settings import get_settings

ROUTERS: tuple[APIRouter, ...] = (endpoints.router, orders.router, events.router, leads.router, recipients.router,
                                  notifications.router, otp.router, campaigns.router, balance.router, receipts.router,
                                  health.router, search.router, messages.router, session.router)

OPENAPI_URL = "/api/openapi.json"

# Unmatched /api/... would fall through to Reflex's HTML 404: answer JSON instead. Registered LAST.
not_found = APIRouter()


def _allowed(scope: Scope) -> list[str]:
    """Every method some route serves at this path (the router alone names only its first partial match's)."""
    return sorted({m for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)
                   and r.matches(scope)[0] != Match.NONE for m in (r.methods or ())})


def _method_not_allowed(allowed: list[str]) -> JSONResponse:
    return JSONResponse({"error": "method_not_allowed", "allowed": allowed}, status_code=405,
                        headers={"Allow": ", ".join(allowed)})


@not_found.api_route("/api/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE"],
                     include_in_schema=False)
async def api_not_found(rest: str, request: Request) -> JSONResponse:
    """A path no route has: 404. A path that exists with other methods: 405 naming them in `Allow`."""
    allowed = _allowed(request.scope)
    if allowed:
        return _method_not_allowed(allowed)
    return JSONResponse({"error": "not_found", "path": f"/api/{rest}"}, status_code=404)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 405 and (allowed := _allowed(request.scope)):
        return _method_not_allowed(allowed)
    return await errors.http_error(request, exc)


def build_api() -> FastAPI:
    docs = bool(get_settings().api_docs)  # production: off unless OUTBOX_API_DOCS=1
    # FastAPI's own docs page is off (it loads Swagger UI from a CDN): ours serves the files itself (docs.py). No
    # OAuth2 redirect page either: there is no OAuth2 here, and FastAPI would put it at /docs/..., outside /api.
    api = FastAPI(title="Outbox API", version="1.0", openapi_url=OPENAPI_URL if docs else None,
                  docs_url=None, redoc_url=None, swagger_ui_oauth2_redirect_url=None)
    if docs:
        api_docs.install(api, OPENAPI_URL)
    # add_middleware puts each new layer outside the previous ones: the request crosses them bottom-up, i.e.
    # RequestContext -> ApiKeyGate -> BodyLimit -> HostileInput -> Idempotency -> the route (see guard.py).
    api.add_middleware(Idempotency)
    api.add_middleware(HostileInput)
    api.add_middleware(BodyLimit, max_bytes=get_settings().max_body_bytes)
    # The gate matches a request against the routers' own routes (the same order the app matches them in).
    api.add_middleware(ApiKeyGate, routes=[r for router in ROUTERS for r in router.routes], needs_key=needs_key,
                       authenticate=authenticate)
    api.add_middleware(RequestContext)
    errors.install(api)
    api.add_exception_handler(StarletteHTTPException, _http_error)  # a 405's Allow names every route's methods
    for router in ROUTERS:
        api.include_router(router, responses=errors.COMMON_RESPONSES)
    api.include_router(not_found)
    build_schema = api.openapi

    def openapi() -> dict[str, Any]:
        """The generated document plus what HostileInput enforces (no NUL in any string) and the Idempotency-Key
        header, computed once."""
        if api.openapi_schema is None:
            doc = build_schema()
            publish_idempotency(doc)
            publish_text_rules(doc)
        schema = api.openapi_schema
        assert schema is not None  # FastAPI's openapi() stores what it built
        return schema

    api.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented hook for a custom schema
    return api

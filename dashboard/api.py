"""The HTTP API (/api/v1), described by OpenAPI at /api/openapi.json, mounted into the Reflex backend.

Thin edge: parse, authenticate (tenant and actor come from the bearer key, never from the body), call the domain,
format. Domain results map to status codes in one place (`_command_response`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from dashboard.limits import BodyLimit
from domain import delivery, journeys, queries
from domain.auth import Principal, principal_for_key
from domain.commands import Committed, NotFound, Rejected, create_order, execute_order_command
from domain.db import UnitOfWork
from domain.rules import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.settings import get_settings
from domain.signing import WebhookVerificationError, verify
from jobs.constants import REFRESH_PUBLISHES
from jobs.wake import after_commit, arq_pool, publish_refresh

_pool: Any = None
_pool_lock = asyncio.Lock()


async def redis_pool() -> Any:
    """One arq pool per backend worker, created on first use (mounted apps get no lifespan)."""
    global _pool
    async with _pool_lock:
        if _pool is None:
            _pool = await arq_pool()
    return _pool


class ApiError(Exception):
    def __init__(self, status: int, error: str, **extra: Any) -> None:
        self.status, self.body = status, {"error": error, **extra}


async def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise ApiError(401, "unauthorized", detail="send Authorization: Bearer <api key>")
    p = await asyncio.to_thread(principal_for_key, authorization[7:].strip())
    if p is None:
        raise ApiError(401, "unauthorized", detail="unknown or revoked api key")
    return p


Auth = Annotated[Principal, Depends(principal)]


class TransitionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected_revision: int = Field(ge=0)
    request_id: str = Field(min_length=1, max_length=100)


class OrderIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer_ref: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    amount_cents: int = Field(ge=0, le=10**12)
    currency: str = Field(pattern=r"^[A-Za-z]{3}$")


class LeadIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recipient_ref: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    advisor_ref: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")


class LeadEventIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event: str = Field(min_length=1, max_length=64)


class TransitionOut(BaseModel):
    order_id: int
    status: str
    revision: int
    event_id: uuid.UUID


def build_api() -> FastAPI:
    api = FastAPI(title="Outbox API", version="1.0", openapi_url="/api/openapi.json", docs_url="/api/docs",
                  redoc_url=None)
    api.add_middleware(BodyLimit, max_bytes=get_settings().max_body_bytes)

    @api.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body, status_code=exc.status)

    @api.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
        malformed = any(e.get("type") == "json_invalid" for e in exc.errors())
        return JSONResponse({"error": "malformed_json" if malformed else "invalid_request", "details": errors},
                            status_code=400 if malformed else 422)

    @api.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": "not_found" if exc.status_code == 404 else "http_error",
                             "detail": exc.detail}, status_code=exc.status_code)

    async def _transition(p: Principal, order_id: int, command: str, body: TransitionIn) -> JSONResponse:
        result = await asyncio.to_thread(
            execute_order_command, tenant_id=p.tenant_id, order_id=order_id, command=command,
            expected_revision=body.expected_revision, actor_ref=p.actor_ref, request_id=body.request_id)
        if isinstance(result, NotFound):
            return JSONResponse({"error": "not_found"}, status_code=404)
        if isinstance(result, Rejected):
            if result.error == "optimistic_conflict":
                return JSONResponse({"error": "optimistic_conflict", "current_revision": result.current_revision},
                                    status_code=409)
            return JSONResponse({"error": result.error, "current_status": result.current_status,
                                 "requested": command}, status_code=422)
        assert isinstance(result, Committed)
        await after_commit(await _maybe_pool(), result)
        return JSONResponse(TransitionOut(order_id=order_id, status=result.status, revision=result.revision,
                                          event_id=result.event_id).model_dump(mode="json"))

    @api.post("/api/v1/orders/{order_id}/approve", response_model=TransitionOut,
              responses={409: {}, 422: {}, 404: {}, 401: {}})
    async def approve(order_id: int, body: TransitionIn, p: Auth) -> JSONResponse:
        return await _transition(p, order_id, "approve", body)

    @api.post("/api/v1/orders/{order_id}/cancel", response_model=TransitionOut,
              responses={409: {}, 422: {}, 404: {}, 401: {}})
    async def cancel(order_id: int, body: TransitionIn, p: Auth) -> JSONResponse:
        return await _transition(p, order_id, "cancel", body)

    @api.post("/api/v1/orders/{order_id}/fulfill", response_model=TransitionOut,
              responses={409: {}, 422: {}, 404: {}, 401: {}})
    async def fulfill(order_id: int, body: TransitionIn, p: Auth) -> JSONResponse:
        return await _transition(p, order_id, "fulfill", body)

    @api.post("/api/v1/orders", status_code=201)
    async def create(body: OrderIn, p: Auth) -> JSONResponse:
        oid = await asyncio.to_thread(create_order, tenant_id=p.tenant_id, customer_ref=body.customer_ref,
                                      amount_cents=body.amount_cents, currency=body.currency)
        return JSONResponse({"order_id": oid, "status": "authorized", "revision": 1}, status_code=201)

    @api.get("/api/v1/orders")
    async def list_orders(
        p: Auth, status: Literal["authorized", "approved", "cancelled", "fulfilled"] | None = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> dict[str, Any]:
        rows = await asyncio.to_thread(queries.list_orders, p.tenant_id, status, limit)
        return {"orders": rows}

    @api.get("/api/v1/orders/{order_id}")
    async def get_order(order_id: int, p: Auth) -> dict[str, Any]:
        return await _tenant_row(queries.get_order, p.tenant_id, order_id)

    @api.get("/api/v1/events/{event_id}")
    async def get_event(event_id: uuid.UUID, p: Auth) -> dict[str, Any]:
        return await _tenant_row(queries.get_event, p.tenant_id, event_id)

    @api.post("/api/v1/leads", status_code=201)
    async def new_lead(body: LeadIn, p: Auth) -> JSONResponse:
        lid = await asyncio.to_thread(journeys.create_lead, p.tenant_id, body.recipient_ref, body.advisor_ref)
        return JSONResponse({"lead_id": lid, "current_step": None}, status_code=201)

    @api.post("/api/v1/leads/{lead_id}/events")
    async def lead_event(lead_id: int, body: LeadEventIn, p: Auth) -> JSONResponse:
        r = await asyncio.to_thread(journeys.record_lead_event, p.tenant_id, lead_id, body.event)
        if r.outcome == "not_found":
            return JSONResponse({"error": "not_found"}, status_code=404)
        if r.outcome == "unknown_event":
            return JSONResponse({"error": "unknown_step", "event": body.event, "steps": list(JOURNEY_STEPS),
                                 "lifecycle_events": list(LIFECYCLE_EVENTS)}, status_code=422)
        return JSONResponse({
            "lead_id": lead_id, "outcome": r.outcome, "current_step": r.current_step, "intent_id": r.intent_id,
            "cancelled_intent_id": r.cancelled_intent_id,
            "scheduled_for": r.scheduled_for.isoformat() if r.scheduled_for else None,
            "notification_ids": list(r.notification_ids)})

    @api.get("/api/v1/leads/{lead_id}")
    async def get_lead(lead_id: int, p: Auth) -> dict[str, Any]:
        return await _tenant_row(queries.lead_detail, p.tenant_id, lead_id)

    @api.post("/api/v1/receipts/{provider}")
    async def receipt(provider: str, request: Request) -> JSONResponse:
        if provider not in ("whatsapp", "sms", "email"):
            return JSONResponse({"error": "unknown_provider"}, status_code=404)
        body = await request.body()
        try:
            data = verify(get_settings().receipt_secret, body, dict(request.headers))
            rid, ref, outcome = str(data["receipt_id"]), str(data["provider_reference"]), str(data["outcome"])
        except (WebhookVerificationError, ValueError, KeyError, TypeError):
            return JSONResponse({"error": "bad_signature"}, status_code=401)
        if request.headers.get("webhook-id") != rid:
            return JSONResponse({"error": "bad_signature"}, status_code=401)
        try:
            r = await asyncio.to_thread(delivery.apply_receipt, provider, rid, ref, outcome)
        except ValueError as exc:
            return JSONResponse({"error": "invalid_receipt", "detail": str(exc)}, status_code=422)
        if r.status == "unknown_reference":
            return JSONResponse({"error": "unknown_reference"}, status_code=404)
        if r.status == "not_yet_sent":
            return JSONResponse({"error": "not_yet_sent", "retry": True}, status_code=409)
        if r.status == "applied" and r.order_id is not None and r.tenant_id is not None:
            pool = await _maybe_pool()
            if pool is not None:
                try:
                    await publish_refresh(pool, r.tenant_id, r.order_id, -1, None, kind="notification")
                except Exception:
                    pass
        return JSONResponse({"status": r.status})

    @api.get("/healthz")
    async def healthz() -> JSONResponse:
        checks = {"postgres": False, "redis": False}
        try:
            await asyncio.to_thread(_ping_db)
            checks["postgres"] = True
        except Exception:
            pass
        try:
            pool = await redis_pool()
            checks["redis"] = bool(await asyncio.wait_for(pool.ping(), 2))
        except Exception:
            pass
        ok = all(checks.values())
        return JSONResponse({"status": "ok" if ok else "degraded", **checks}, status_code=200 if ok else 503)

    @api.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(await asyncio.to_thread(_render_metrics, await _publishes()),
                                 media_type="text/plain; version=0.0.4")

    @api.api_route("/api/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
    async def api_not_found(rest: str) -> JSONResponse:
        return JSONResponse({"error": "not_found", "path": f"/api/{rest}"}, status_code=404)

    return api


async def _tenant_row(query: Any, tenant_id: int, key: Any) -> dict[str, Any]:
    """A tenant-scoped read: another tenant's row and a missing row both answer 404 (no existence leak)."""
    row: dict[str, Any] | None = await asyncio.to_thread(query, tenant_id, key)
    if row is None:
        raise ApiError(404, "not_found")
    return row


async def _maybe_pool() -> Any:
    try:
        return await redis_pool()
    except Exception:
        return None


def _ping_db() -> None:
    with UnitOfWork() as uow:
        uow.execute(sa.text("SELECT 1"))


async def _publishes() -> int:
    pool = await _maybe_pool()
    try:
        return int(await pool.get(REFRESH_PUBLISHES) or 0) if pool else 0
    except Exception:
        return 0


def _render_metrics(publishes: int) -> bytes:
    """Gauges are computed from PostgreSQL at scrape time, so every backend worker reports the same truth."""
    stats = queries.lane_stats()

    class _Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            fams = {
                "depth": GaugeMetricFamily("outbox_lane_depth", "Owed (QUEUED) ledger rows", labels=["lane"]),
                "oldest": GaugeMetricFamily("outbox_lane_oldest_owed_seconds", "Age of the oldest owed row",
                                            labels=["lane"]),
                "attempts": CounterMetricFamily("outbox_lane_attempts", "Delivery attempts", labels=["lane"]),
                "failed": GaugeMetricFamily("outbox_lane_failed", "FAILED rows", labels=["lane"]),
                "review": GaugeMetricFamily("outbox_lane_review", "FAILED rows needing review", labels=["lane"]),
                "p50": GaugeMetricFamily("outbox_lane_latency_p50_ms", "Send latency p50", labels=["lane"]),
                "p99": GaugeMetricFamily("outbox_lane_latency_p99_ms", "Send latency p99", labels=["lane"]),
                "paused": GaugeMetricFamily("outbox_lane_paused", "1 when the lane is paused", labels=["lane"]),
            }
            for s in stats:
                lane = [s["lane"]]
                fams["depth"].add_metric(lane, s["depth"])
                fams["oldest"].add_metric(lane, s["oldest_owed_seconds"])
                fams["attempts"].add_metric(lane, s["attempts"])
                fams["failed"].add_metric(lane, s["failed"])
                fams["review"].add_metric(lane, s["review"])
                fams["p50"].add_metric(lane, s["p50_ms"])
                fams["p99"].add_metric(lane, s["p99_ms"])
                fams["paused"].add_metric(lane, 1 if s["paused"] else 0)
            yield from fams.values()
            yield CounterMetricFamily("outbox_refresh_publishes", "Refresh messages published", value=publishes)

    reg = CollectorRegistry()
    reg.register(_Collector())  # type: ignore[arg-type]
    return generate_latest(reg)


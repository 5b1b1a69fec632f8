"""Operations endpoints: `/healthz` (PostgreSQL and Redis answer) and `/metrics` (Prometheus)."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Iterator
from typing import Annotated, Any, cast

import sqlalchemy as sa
from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dashboard.api.deps import maybe_pool, redis_pool
from dashboard.api.errors import METRICS_TOKEN, METRICS_TOKEN_REFUSED, unauthorized
from dashboard.api.metrics import REQUESTS, TelemetryCollector
from domain import invariants
from domain.cdc import views as cdc_views
from domain.db import UnitOfWork
from domain.delivery import telemetry
from domain.delivery import views as delivery_views
from domain.delivery.queue import REFRESH_PUBLISHES
from domain.settings import get_settings

router = APIRouter(tags=["operations"])


def _ping_db() -> None:
    with UnitOfWork() as uow:
        uow.execute(sa.text("SELECT 1"))


@router.get("/healthz", responses={503: {"description": "PostgreSQL or Redis does not answer"}})
async def healthz() -> JSONResponse:
    checks = {"postgres": False, "redis": False}
    try:
        await asyncio.to_thread(_ping_db)
        checks["postgres"] = True
    except Exception:
        pass
    try:
        pool = await redis_pool()
        # redis-py types ping() as sync|async: the pool is async.
        checks["redis"] = bool(await asyncio.wait_for(cast(Awaitable[bool], pool.ping()), 2))
    except Exception:
        pass
    ok = all(checks.values())
    return JSONResponse({"status": "ok" if ok else "degraded", **checks}, status_code=200 if ok else 503)


METRICS_TTL_SECONDS = 5.0
_cache: tuple[float, bytes] | None = None


@router.get("/metrics", response_model=None, response_class=PlainTextResponse)
async def metrics(authorization: Annotated[str | None, Header()] = None) -> PlainTextResponse:
    """Prometheus text. Production: only with `Authorization: Bearer $OUTBOX_METRICS_TOKEN`. The figures are
    computed from PostgreSQL at most every few seconds, however often it is scraped."""
    global _cache
    s = get_settings()
    if s.env == "production" and not hmac.compare_digest((authorization or "").encode(),
                                                         f"Bearer {s.metrics_token}".encode()):
        raise unauthorized(METRICS_TOKEN_REFUSED if authorization else METRICS_TOKEN,
                           detail="send Authorization: Bearer <metrics token>")
    now = time.monotonic()
    if _cache is None or now - _cache[0] > METRICS_TTL_SECONDS:
        _cache = (now, await asyncio.to_thread(render_metrics, await _publishes()))
    return PlainTextResponse(_cache[1], media_type="text/plain; version=0.0.4")


async def _publishes() -> int:
    pool = await maybe_pool()
    try:
        return int(await pool.get(REFRESH_PUBLISHES) or 0) if pool else 0
    except Exception:
        return 0


class LaneCollector:
    """Gauges computed from PostgreSQL at scrape time, so every backend worker reports the same truth."""

    def __init__(self, stats: list[dict[str, Any]], publishes: int) -> None:
        self.stats, self.publishes = stats, publishes

    def collect(self) -> Iterator[Metric]:
        fams: dict[str, tuple[GaugeMetricFamily | CounterMetricFamily, str]] = {
            "depth": (GaugeMetricFamily("outbox_lane_depth", "Owed ledger rows that are due now", labels=["lane"]),
                      "depth"),
            "oldest": (GaugeMetricFamily("outbox_lane_oldest_owed_seconds", "How long the oldest due row has waited",
                                         labels=["lane"]), "oldest_owed_seconds"),
            "attempts": (CounterMetricFamily("outbox_lane_attempts", "Delivery attempts", labels=["lane"]),
                         "attempts"),
            "failed": (GaugeMetricFamily("outbox_lane_failed", "FAILED rows", labels=["lane"]), "failed"),
            "review": (GaugeMetricFamily("outbox_lane_review", "FAILED rows needing review", labels=["lane"]),
                       "review"),
            "p50": (GaugeMetricFamily("outbox_lane_latency_p50_ms", "Send latency p50", labels=["lane"]), "p50_ms"),
            "p99": (GaugeMetricFamily("outbox_lane_latency_p99_ms", "Send latency p99", labels=["lane"]), "p99_ms"),
            "paused": (GaugeMetricFamily("outbox_lane_paused", "1 when the lane is paused", labels=["lane"]),
                       "paused"),
            "scheduled": (GaugeMetricFamily("outbox_lane_scheduled", "Rows scheduled for later (not owed yet)",
                                            labels=["lane"]), "scheduled"),
        }
        for s in self.stats:
            for fam, key in fams.values():
                fam.add_metric([s["lane"]], float(s[key]))
        yield from (fam for fam, _ in fams.values())
        yield CounterMetricFamily("outbox_refresh_publishes", "Refresh messages published", value=self.publishes)
        fenced = invariants.fence_counts()
        yield CounterMetricFamily("outbox_late_accepts", "Sends accepted after their row was settled unsent "
                                  "(recorded as sent and charged)", value=fenced["late_accept"])
        yield CounterMetricFamily("outbox_stale_writes", "Writes refused because the claim's lease had been "
                                  "taken over (fenced)", value=fenced["stale"])
        yield from slot_metrics(cdc_views.slots_wal(get_settings().cdc_slot))


def slot_metrics(slots: list[cdc_views.SlotWal]) -> Iterator[Metric]:
    """The WAL each logical slot makes PostgreSQL keep (docs/alerts.yml: OutboxCdcSlotRetainingWal)."""
    exists = GaugeMetricFamily("outbox_cdc_slot_exists", "1 when the logical replication slot exists",
                               labels=["slot"])
    active = GaugeMetricFamily("outbox_cdc_slot_active", "1 when a process is reading the slot right now",
                               labels=["slot"])
    retained = GaugeMetricFamily("outbox_cdc_slot_retained_bytes", "WAL the server keeps for the slot "
                                 "(from its restart point; 0 when the slot does not exist)", labels=["slot"])
    lost = GaugeMetricFamily("outbox_cdc_slot_lost", "1 when max_slot_wal_keep_size made PostgreSQL give the "
                             "slot's WAL up (wal_status = lost)", labels=["slot"])
    safe = GaugeMetricFamily("outbox_cdc_slot_safe_wal_bytes", "WAL that may still be written before "
                             "max_slot_wal_keep_size invalidates the slot (absent without a cap)", labels=["slot"])
    for s in slots:
        exists.add_metric([s.slot], float(s.exists))
        active.add_metric([s.slot], float(s.active))
        retained.add_metric([s.slot], float(s.retained_bytes))
        lost.add_metric([s.slot], float(s.wal_status == "lost"))
        if s.safe_wal_bytes is not None:
            safe.add_metric([s.slot], float(s.safe_wal_bytes))
    yield from (exists, active, retained, lost, safe)


def render_metrics(publishes: int) -> bytes:
    reg = CollectorRegistry()
    reg.register(LaneCollector(delivery_views.lane_stats(), publishes))
    reg.register(TelemetryCollector(telemetry.snapshot(), get_settings().oldest_owed_slo_seconds))
    reg.register(REQUESTS)
    return generate_latest(reg)

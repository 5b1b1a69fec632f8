"""Latency histograms and the counters docs/alerts.yml needs, for /metrics (dashboard/api/health.py).

`outbox_api_request_duration_seconds` is measured in this process (every API request crosses
`guard.RequestContext`); the ledger's figures come from PostgreSQL at scrape time (domain/delivery/telemetry.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from domain.delivery.queue import LANES
from domain.delivery.telemetry import DELIVERY_BUCKETS, SEND_BUCKETS

REQUESTS = Histogram("outbox_api_request_duration_seconds", "API request latency, by route template and status",
                     ["method", "route", "status"], registry=None,
                     buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    REQUESTS.labels(method, route, str(status)).observe(seconds)


def _histogram(name: str, doc: str, data: dict[str, dict[str, Any]], buckets: tuple[float, ...]) -> Metric:
    fam = HistogramMetricFamily(name, doc, labels=["lane"])
    for lane in LANES:  # every lane always has its series (a rule's metric exists before the first message)
        h = data.get(lane) or {"count": 0, "sum": 0.0, "buckets": [(b, 0) for b in buckets]}
        fam.add_metric([lane], [(repr(b), float(n)) for b, n in h["buckets"]] + [("+Inf", float(h["count"]))],
                       sum_value=h["sum"])
    return fam


class TelemetryCollector:
    def __init__(self, snap: dict[str, Any], slo_seconds: float) -> None:
        self.snap, self.slo = snap, slo_seconds

    def collect(self) -> Iterator[Metric]:
        yield _histogram("outbox_send_latency_seconds", "One delivery attempt's round trip to the provider",
                         self.snap["send"], SEND_BUCKETS)
        yield _histogram("outbox_delivery_seconds", "Commit to send of rows owed at once (journey nudges, "
                         "scheduled by design, left out)", self.snap["delivery"], DELIVERY_BUCKETS)
        attempts = CounterMetricFamily("outbox_attempts", "Delivery attempts by outcome and error class",
                                       labels=["lane", "outcome", "error_class"])
        for r in self.snap["outcomes"]:
            attempts.add_metric([r["lane"], r["outcome"], r["error_class"]], float(r["n"]))
        seen = {(r["lane"], r["outcome"], r["error_class"]) for r in self.snap["outcomes"]}
        for lane in LANES:  # the series the alerts divide by exist from the start
            if (lane, "sent", "") not in seen:
                attempts.add_metric([lane, "sent", ""], 0.0)
        yield attempts
        yield GaugeMetricFamily("outbox_slo_seconds", "The oldest due row's age objective (OUTBOX_SLO_SECONDS)",
                                value=self.slo)
        balance = GaugeMetricFamily("outbox_tenant_balance_cents", "Balance left", labels=["tenant"])
        spent = GaugeMetricFamily("outbox_tenant_spent_last_hour_cents", "Net spend in the last hour",
                                  labels=["tenant"])
        for r in self.snap["money"]:
            balance.add_metric([str(r["tenant_id"])], float(r["balance_cents"]))
            spent.add_metric([str(r["tenant_id"])], float(r["spent_last_hour_cents"]))
        yield balance
        yield spent
        # Tenant webhook endpoints (domain/delivery/circuit.py): disabled automatically after sustained failure (an
        # operator alert, counted from the audit log), and breakers deferring sends right now.
        disabled = CounterMetricFamily("outbox_endpoints_auto_disabled", "Webhook endpoints disabled automatically "
                                       "after sustained failure", labels=["tenant"])
        counts = self.snap["endpoints_auto_disabled"]
        # Every tenant's series exists from the start (at 0), so `increase` sees the first disabling.
        for tenant in sorted({int(r["tenant_id"]) for r in self.snap["money"]} | set(counts)):
            disabled.add_metric([str(tenant)], float(counts.get(tenant, 0)))
        yield disabled
        yield GaugeMetricFamily("outbox_endpoint_breakers_open", "Webhook endpoints whose circuit breaker defers "
                                "their sends now", value=float(self.snap["endpoint_breakers_open"]))

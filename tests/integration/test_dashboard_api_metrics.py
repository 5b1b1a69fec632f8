"""docs/alerts.yml against what /metrics really exports (real ASGI app, real PostgreSQL).

Invariants: the rules file parses as Prometheus rule groups; each of the required alerts is there (oldest due age
over the SLO, failure rate, review items, identity conflicts, balance running out, an SLO burn rate); every metric
an expression names is a series /metrics exports (a renamed metric fails here, not silently in production); the
SLO's bucket bound exists; latency is exported as histograms.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts.yml"
REQUIRED = {"OutboxOldestDueOverSLO", "OutboxDeliveryFailureRate", "OutboxReviewItemsWaiting",
            "OutboxIdentityConflict", "OutboxBalanceRunningOut", "OutboxCriticalSLOBurnRate"}


def _rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _exported(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)}


async def test_every_rule_names_only_metrics_that_metrics_exports(client, key42):
    """Invariant: each `outbox_…` name in an expression is a sample name of a real scrape (or a recorded rule)."""
    # Some traffic first, so the request histogram has series (the ledger's are there from the start).
    assert (await client.get("/api/v1/orders/913", headers=key42)).status_code == 200
    scrape = (await client.get("/metrics")).text
    exported = _exported(scrape)
    rules = _rules()
    recorded = {str(r["record"]) for r in rules if "record" in r}
    assert REQUIRED <= {str(r.get("alert")) for r in rules}
    for r in rules:
        expr = str(r["expr"])
        assert expr.count("(") == expr.count(")"), r
        names = set(re.findall(r"(?<![\w:])(outbox[a-z0-9_:]*)", expr))
        assert names, f"{r.get('alert') or r.get('record')} names no metric"
        missing = names - exported - recorded
        assert not missing, f"{r.get('alert') or r.get('record')}: {missing} not exported by /metrics"
    for histogram in ("outbox_send_latency_seconds", "outbox_delivery_seconds", "outbox_api_request_duration_seconds"):
        assert f"# TYPE {histogram} histogram" in scrape, histogram
    assert 'outbox_delivery_seconds_bucket{lane="critical",le="60.0"}' in scrape, "the SLO's bound is a bucket"


async def test_the_money_and_outcome_series_carry_real_figures(client, key42):
    """Invariant: the balance gauge is the tenant's balance row and attempts are counted from the ledger."""
    import sqlalchemy as sa

    from domain.db import get_engine

    with get_engine().connect() as c:
        balance = c.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = 42")).scalar()
    scrape = (await client.get("/metrics")).text
    assert f'outbox_tenant_balance_cents{{tenant="42"}} {float(balance)}' in scrape
    assert 'outbox_attempts_total{error_class="",lane="critical",outcome="sent"}' in scrape

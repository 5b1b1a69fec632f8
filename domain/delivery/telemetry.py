"""What /metrics reads from the ledger beyond the lane gauges: latency histograms, attempts by outcome, and each
tenant's money left — computed from PostgreSQL at scrape time, so every backend reports the same truth and the
counts only grow (attempts and sent rows are never deleted). docs/alerts.yml is written against these names.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, as_dicts

# Upper bounds in seconds. One attempt's HTTP round trip, and commit to send (the SLO's 60 s is a bound).
SEND_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DELIVERY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


def _filters(expr: str, buckets: tuple[float, ...]) -> str:
    return ", ".join(f"count(*) FILTER (WHERE {expr} <= {b!r}) AS b{i}" for i, b in enumerate(buckets))


SEND_LATENCY = sa.text(f"""
SELECT n.lane, count(*) AS n, coalesce(sum(a.latency_ms), 0) / 1000.0 AS total,
       {_filters("a.latency_ms / 1000.0", SEND_BUCKETS)}
FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
WHERE a.latency_ms IS NOT NULL GROUP BY n.lane""")
# Commit to send, for rows that were owed at once: journey nudges are scheduled for later by design.
DELIVERY_LATENCY = sa.text(f"""
SELECT lane, count(*) AS n, coalesce(sum(extract(epoch FROM sent_at - created_at)), 0) AS total,
       {_filters("extract(epoch FROM sent_at - created_at)", DELIVERY_BUCKETS)}
FROM notifications WHERE sent_at IS NOT NULL AND intent_id IS NULL GROUP BY lane""")
ATTEMPT_OUTCOMES = sa.text("""
SELECT n.lane, a.outcome, coalesce(a.error_class, '') AS error_class, count(*) AS n
FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
GROUP BY n.lane, a.outcome, coalesce(a.error_class, '')""")
TENANT_MONEY = sa.text("""
SELECT b.tenant_id, b.balance_cents,
       coalesce((SELECT -sum(e.amount_cents) FROM balance_entries e WHERE e.tenant_id = b.tenant_id
                 AND e.kind IN ('reserve', 'refund') AND e.created_at > now() - interval '1 hour'), 0)
         AS spent_last_hour_cents
FROM balances b ORDER BY b.tenant_id""")


def _histogram(rows: list[dict[str, Any]], buckets: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    return {r["lane"]: {"count": int(r["n"]), "sum": float(r["total"]),
                        "buckets": [(b, int(r[f"b{i}"])) for i, b in enumerate(buckets)]} for r in rows}


def snapshot(engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        return {
            "send": _histogram(as_dicts(uow.execute(SEND_LATENCY)), SEND_BUCKETS),
            "delivery": _histogram(as_dicts(uow.execute(DELIVERY_LATENCY)), DELIVERY_BUCKETS),
            "outcomes": as_dicts(uow.execute(ATTEMPT_OUTCOMES)),
            "money": as_dicts(uow.execute(TENANT_MONEY)),
        }

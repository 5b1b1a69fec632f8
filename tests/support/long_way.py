"""A claim taken and answered through the long way's store (domain/delivery/long_way.py), the way a worker would,
and the row and money it leaves (`claim`, `ready`, `lease_runs_out`, `record`, `row`, `entries`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan

LEASE = 30.0


def claim(nid: int, worker: str = "w") -> plan.ClaimResult | None:
    return long_way.claim(nid, LEASE, datetime.now(UTC), worker)


def ready(nid: int, worker: str = "w") -> plan.Claim:
    r = claim(nid, worker)
    assert isinstance(r, plan.Ready), r
    return r.claim


def lease_runs_out(nid: int) -> None:
    """What a stalled worker finds when it resumes: its lease is over."""
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET leased_until = now() - interval '1 second' WHERE id = :i"),
                  {"i": nid})


def record(c: plan.Claim, decision: Any, ref: str | None = None, code: int | None = 201) -> str:
    return long_way.record(c, decision, worker="t", started=datetime.now(UTC), status_code=code, latency_ms=1.0,
                           provider_reference=ref)


def row(nid: int) -> Any:
    with get_engine().connect() as c:
        return c.execute(sa.text("SELECT * FROM notifications WHERE id = :i"), {"i": nid}).one()


def entries(nid: int) -> list[tuple[str, int]]:
    with get_engine().connect() as c:
        return [tuple(r) for r in c.execute(sa.text(
            "SELECT kind, amount_cents FROM balance_entries WHERE notification_id = :i ORDER BY id"), {"i": nid})]

"""A tenant endpoint's breaker under a stalled worker and a second concurrent worker, on real PostgreSQL.

Invariant: the record that disables an endpoint (sustained failure) and the record of a stalled worker on another of
the endpoint's rows (its lease ran out, no one has claimed the row since, so its token still holds) both complete:
neither is aborted as a deadlock victim. The disabling settles what no one holds; the row the stalled worker holds
is its own to record, and its next claim settles it with the endpoint's reason.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.retry import Retry
from jobs.ops.procs import wait_until
from tests.integration.conftest import rows
from tests.support.endpoints import PUBLIC, endpoint, endpoint_row
from tests.support.orders import approve, orders_of


def _waiting_on_locks() -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"))
            .scalar_one())



def test_a_stalled_workers_record_and_an_endpoints_auto_disable_never_deadlock(db, redis_db):  # type: ignore[no-untyped-def]
    """Invariant: both records complete (no deadlock victim, no error): the disabling one disables the endpoint and
    records 'retry'; the stalled one records its own 'retry' under its still-valid token and moves no breaker of a
    disabled endpoint; its row, still owed, is settled `endpoint_disabled` by its next claim."""
    e = endpoint(42, PUBLIC)
    first, second = (approve(oid) for oid in orders_of(42)[:2])
    (a,) = rows("event_id = :e AND endpoint_id = :i", e=first.event_id, i=e["id"])
    (b,) = rows("event_id = :e AND endpoint_id = :i", e=second.event_id, i=e["id"])
    now = datetime.now(UTC)
    ca, cb = long_way.claim(a.id, 30, now), long_way.claim(b.id, 30, now)
    assert isinstance(ca, plan.Ready) and isinstance(cb, plan.Ready)
    with get_engine().begin() as c:  # the next failure is sustained failure; b's worker has stalled past its lease
        c.execute(sa.text("UPDATE webhook_endpoints SET failure_streak = 100, failing_since = now() - interval "
                          "'1 day' WHERE id = :i"), {"i": e["id"]})
        c.execute(sa.text("UPDATE notifications SET leased_until = now() - interval '1 second' WHERE id = :b"),
                  {"b": b.id})

    blocker = get_engine().connect()  # holds the endpoint row so the two records meet at it in a known order
    tx = blocker.begin()
    blocker.execute(sa.text("SELECT 1 FROM webhook_endpoints WHERE id = :i FOR UPDATE"), {"i": e["id"]})
    out: dict[str, Any] = {}

    def record(name: str, c: plan.Claim) -> None:
        try:
            out[name] = long_way.record(c, Retry("server_error", 60), worker=name, started=datetime.now(UTC),
                                        status_code=503, latency_ms=1.0, provider_reference=None)
        except Exception as exc:  # reported by the assertion below
            out[name] = exc

    ta = threading.Thread(target=record, args=("disabler", ca.claim))
    tb = threading.Thread(target=record, args=("stalled", cb.claim))
    try:
        ta.start()
        wait_until(lambda: _waiting_on_locks() >= 1, 20, "the first record to wait for the endpoint")
        tb.start()
        wait_until(lambda: _waiting_on_locks() >= 2, 20, "the second record to wait for the endpoint")
    finally:
        tx.rollback()
        blocker.close()
        ta.join(30)
        tb.join(30)
    assert out == {"disabler": "retry", "stalled": "retry"}, out
    ep = endpoint_row(e["id"])
    assert ep.disabled_at is not None and "disabled automatically" in ep.disabled_reason
    (a_after,) = rows("id = :i", i=a.id)
    assert a_after.status == "SUPPRESSED" and a_after.suppressed_reason == "endpoint_disabled"
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() WHERE id = :b"), {"b": b.id})
    settled = long_way.claim(b.id, 30, datetime.now(UTC) + timedelta(seconds=1))
    assert isinstance(settled, plan.Suppressed) and settled.reason == "endpoint_disabled", settled

"""The fair bulk lane, against real processes (receiver, API, relay, a bulk worker) on real PostgreSQL and Redis.

Invariants: a small tenant's campaign started behind a big tenant's backlog is not starved — all of it is sent
before the big backlog is half done; a tenant's capped bulk pace holds, and the jobs it keeps waiting hold no
worker slot another tenant needs; cancelling the big campaign still stops its sends (every row it owed is
suppressed with its reason, none sent after); every invariant holds afterwards (the fixture checks them). A
tenant's turn is shared only by its flows that owe something due now: a campaign whose rest waits for quiet hours
does not make the tenant's new campaign advance two flows' virtual time per job.
"""

from __future__ import annotations

import itertools

import sqlalchemy as sa

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import get_engine
from domain.delivery import fair_queue
from tests.integration.conftest import wait_for
from tests.support.campaigns import fanned_out_campaign, reachable_people


def one(q: str, **p):  # type: ignore[no-untyped-def]
    with get_engine().connect() as c:
        return c.execute(sa.text(q), p).scalar()


def _sent(cid: int) -> int:
    return int(one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND sent_at IS NOT NULL", c=cid))


def _size(cid: int) -> int:
    return int(one("SELECT count(*) FROM notifications WHERE campaign_id = :c", c=cid))


def test_a_small_tenant_is_not_starved_behind_a_big_backlog_and_cancel_still_stops_sends(sys_, redis_db):
    reachable_people(42, 1_500)
    reachable_people(7, 20)
    sys_.start_worker("bulk")
    big = fanned_out_campaign(42, "Big")
    total = one("SELECT count(*) FROM notifications WHERE campaign_id = :c", c=big)
    wait_for(lambda: _sent(big) >= 50, 60, "the big campaign to be sending")
    small = fanned_out_campaign(7, "Small")
    n_small = _size(small)  # the 20 seeded and the tenant's demo people
    wait_for(lambda: _sent(small) == n_small, 60, "the small tenant's messages")
    last_small = one("SELECT max(sent_at) FROM notifications WHERE campaign_id = :c", c=small)
    big_before = one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND sent_at <= :t", c=big,
                     t=last_small)
    print(f"small tenant's {n_small} all sent when the big one had sent {big_before} of {total}")
    assert big_before < total / 2, "the small tenant waited behind the big backlog"

    suppressed = campaign_fan_out.cancel(42, big)
    assert suppressed is not None and suppressed > 0
    wait_for(lambda: one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND status = 'QUEUED'",
                         c=big) == 0, 30, "the rows under a lease at cancel to end")
    cancelled_at = one("SELECT max(settled_at) FROM notifications WHERE campaign_id = :c "
                       "AND suppressed_reason = 'campaign_cancelled'", c=big)
    assert one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND status = 'SUPPRESSED' "
               "AND suppressed_reason = 'campaign_cancelled'", c=big) >= suppressed
    assert one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND sent_at > :t + interval '5 seconds'",
               c=big, t=cancelled_at) == 0, "a cancelled campaign went on sending"


def test_a_tenants_capped_pace_holds_and_its_waiting_jobs_block_no_other_tenant(sys_, redis_db):
    assert fair_queue.set_tenant_bulk_rate(7, 3.0) and not fair_queue.set_tenant_bulk_rate(999, 3.0)
    reachable_people(42, 600)
    reachable_people(7, 20)
    sys_.start_worker("bulk")
    capped = fanned_out_campaign(7, "Capped")
    other = fanned_out_campaign(42, "Other")
    n = _size(capped)
    wait_for(lambda: _sent(capped) == n, 90, "the capped tenant's messages")
    first, last = (one(f"SELECT {f}(sent_at) FROM notifications WHERE campaign_id = :c", c=capped)
                   for f in ("min", "max"))
    seconds = (last - first).total_seconds()
    other_meanwhile = one("SELECT count(*) FROM notifications WHERE campaign_id = :c AND sent_at BETWEEN :a AND :b",
                          c=other, a=first, b=last)
    print(f"capped tenant: {n} sent over {seconds:.1f}s = {(n - 1) / seconds:.1f}/s (cap 3/s); the other tenant "
          f"sent {other_meanwhile} meanwhile")
    assert (n - 1) / seconds <= 3.0 * 1.2, "the tenant's cap did not hold"
    # The uncapped tenant went on at the lane's pace while the capped one's jobs waited for their moments: had
    # they held the worker's slots, it would have sent next to nothing.
    assert other_meanwhile >= 2 * n, "the capped tenant's waiting jobs held the worker's slots"
    campaign_fan_out.cancel(42, other)


def test_a_capped_tenants_moments_are_reserved_one_apart_and_never_raced(redis_db):
    """The reservation under a tenant's cap (ratelimit.reserve): 30 concurrent callers at 10/s, 0.5 s ahead at
    most, get distinct moments 1/10 s apart — the first now, none further than 0.5 s — and every other caller holds
    none and is told how long to stay away; another tenant's reservations are its own."""
    import asyncio
    import os

    import redis.asyncio as aioredis

    from domain.delivery import ratelimit

    async def run() -> tuple[list[float], list[float], float]:
        client = aioredis.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])
        got = await asyncio.gather(*(ratelimit.reserve(client, "test:fair:t1", 10.0, 0.5) for _ in range(30)))
        other = await ratelimit.reserve(client, "test:fair:t2", 10.0, 0.5)
        await client.aclose()
        return sorted(w for w in got if w >= 0), sorted(w for w in got if w < 0), other

    held, refused, other = asyncio.run(run())
    # Six moments fit in 0.5 s at 10/s (a few more only if the 30 calls themselves took longer than an interval).
    assert 6 <= len(held) <= 8 and len(held) + len(refused) == 30 and other == 0.0, (held, refused)
    assert held[0] < 0.05 and max(held) <= 0.5
    # Never two moments within one interval (waits are measured from each call's own time: a later call's is
    # shorter by how much later it ran, never longer).
    assert all(0.05 < b - a <= 0.1 + 0.005 for a, b in itertools.pairwise(held)), held
    assert all(0 < -w <= 0.1 + 0.005 for w in refused), refused




def test_only_flows_owing_something_due_share_a_tenants_turn(relay_stopped, db, redis_db):
    reachable_people(7, 5)
    waiting, fresh = fanned_out_campaign(7, "Waits for the morning"), fanned_out_campaign(7, "New")
    both = {_flow(r): gap for r, gap in fair_queue.scan_bulk_window(200) if r.tenant_id == 7}
    assert both == {(7, waiting): 2, (7, fresh): 2}, "two due campaigns share the tenant's turn"
    with get_engine().begin() as c:  # what quiet hours do: owed, due in the morning
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() + interval '8 hours' "
                          "WHERE campaign_id = :c"), {"c": waiting})
    gaps = {_flow(r): gap for r, gap in fair_queue.scan_bulk_window(200) if r.tenant_id == 7}
    assert gaps == {(7, fresh): 1}, "a campaign owing nothing due takes no share of the tenant's turn"


def _flow(row) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    return int(row.tenant_id), int(row.campaign_id or 0)

"""The fair bulk lane, applied (the decisions are domain/delivery/fair_plan.py's).

- The relay's window on the bulk lane (`scan_bulk_window`): instead of the lane's oldest owed rows — which, behind
  a 40,000-row campaign, kept a small tenant's rows out of Redis until the big one was nearly done — each
  (tenant, campaign) flow's oldest owed rows, the window shared by `fair_plan.windows`.
- The score of each bulk wake-up (`enqueue_fair`): start-time fair queueing over flows, one Lua call per batch, so
  arq's sorted set — which its workers read lowest score first — interleaves tenants job by job. Scores sit at
  least `LAG_MS` in the past (every scored job is due at once: the order is fair, the pace stays the buckets').
- The pace: the channel's token bucket, and under it a tenant's own when its pace is capped (jobs/worker.py): a job
  reserves its moment (`ratelimit.reserve`) up to `fair_plan.reserve_ahead` away and sleeps until then; further
  away, it ends without claiming and the relay's next scan wakes the row again — never a deferred retry, whose
  real-time score would queue it behind every fairly scored job (they sit `LAG_MS` in the past).

Redis stays a wake-up: the flows' virtual times live in one hash that may be lost with the rest of Redis; the next
scan rebuilds every wake-up from PostgreSQL, each flow's share again, and the scores start afresh from the queue's
head — fair again from the first job.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.delivery import fair_plan, sql, sql_reads
from domain.delivery.fair_plan import Flow
from domain.delivery.queue import DELIVER_TASK, FAIR_TAGS_KEY, queue_name
from domain.ledger.owed import OwedRow
from domain.settings import get_settings

LAG_MS: Final[int] = 10_000
TAGS_TTL_S: Final[int] = 3_600

# Scores and enqueues one batch of bulk wake-ups in one call (a relay page of 500 is one round trip, not three per
# job): a job is written exactly as arq's `enqueue_job` writes it (its job key, then its id in the queue at its
# score) and only if no job or result of that id exists — idempotent by job id, like arq; a skipped job does not
# move its flow's virtual time.
FAIR_ENQUEUE: Final[str] = """
local now, lag, ttl, extra = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = now - lag
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] and tonumber(head[2]) < v then v = tonumber(head[2]) end
local last, n = {}, 0
for i = 0, (#ARGV - 4) / 4 - 1 do
  local f, gap, id, job = ARGV[5 + 4 * i], tonumber(ARGV[6 + 4 * i]), ARGV[7 + 4 * i], ARGV[8 + 4 * i]
  if redis.call('EXISTS', KEYS[3 + 2 * i], KEYS[4 + 2 * i]) == 0 then
    local l = last[f] or tonumber(redis.call('HGET', KEYS[2], f)) or 0
    local s = math.min(math.max(v, l) + gap, now)
    last[f] = s
    redis.call('SET', KEYS[3 + 2 * i], job, 'PX', math.floor(s - now + extra))
    redis.call('ZADD', KEYS[1], s, id)
    n = n + 1
  end
end
for f, s in pairs(last) do redis.call('HSET', KEYS[2], f, tostring(s)) end
redis.call('EXPIRE', KEYS[2], ttl)
return n
"""


async def enqueue_fair(redis: Any, rows: list[OwedRow]) -> int:
    """The bulk wake-ups of `rows`, scored by fair queueing over their flows (a flow's jobs in the order given);
    returns how many were enqueued (a row whose job is live is skipped)."""
    if not rows:
        return 0
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    keys: list[str] = [queue_name("bulk"), FAIR_TAGS_KEY]
    args: list[Any] = [now_ms, LAG_MS, TAGS_TTL_S, redis.expires_extra_ms]
    for r in rows:
        keys += [job_key_prefix + r.job_id, result_key_prefix + r.job_id]
        args += [r.flow, r.gap_ms, r.job_id,
                 serialize_job(DELIVER_TASK, (r.notification_id, r.created_at), {}, None, now_ms,
                                                         serializer=redis.job_serializer)]
    return int(await redis.eval(FAIR_ENQUEUE, len(keys), *keys, *args))


async def front_score(redis: Any) -> datetime:
    """A score ahead of every waiting bulk job: a campaign's fan-out (a few batches of ledger writes) is control
    work that must not wait behind the wake-ups of another tenant's backlog."""
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    head = await redis.zrange(queue_name("bulk"), 0, 0, withscores=True)
    front = now_ms - LAG_MS if not head else min(float(head[0][1]), now_ms - LAG_MS)
    return datetime.fromtimestamp(max(front - 1, now_ms - 3_600_000) / 1000, UTC)


def scan_bulk_window(window: int, horizon_seconds: float = 1.0, limit: int = 500,
                     engine: Engine | None = None) -> list[tuple[Any, int]]:
    """The bulk lane's fair window: (scanned row, its flow's gap in ms) for each flow's oldest owed, due rows."""
    s = get_settings()
    params = {"horizon": horizon_seconds, "lease": s.lease_seconds}
    with UnitOfWork(engine) as uow:
        found = uow.execute(sql.BULK_DUE_FLOWS.sa).all()
        flows = [Flow(int(r.tenant_id), int(r.campaign_id)) for r in found]
        caps: dict[int, float] = {}
        for r in found:
            rate = fair_plan.tenant_rate(s.bulk_rate_per_second, s.bulk_tenant_rate, r.tenant_rate)
            if rate < s.bulk_rate_per_second:
                caps[int(r.tenant_id)] = rate
        shares = fair_plan.windows(flows, window, caps)
        got: dict[Flow, list[Any]] = {f: [] for f in flows}

        def page(f: Flow, n: int) -> None:
            while n > 0:
                after = got[f][-1].id if got[f] else 0
                rows = uow.execute(sql_reads.SCAN_OWED_FLOW, {
                    **params, "tenant_id": f.tenant_id, "campaign_id": f.campaign_id, "after": after,
                    "limit": min(n, limit)}).all()
                got[f] += rows
                n = 0 if len(rows) < min(n, limit) else n - len(rows)

        for f, n in shares.items():
            page(f, n)
        for f, n in fair_plan.spare(shares, {f: len(r) for f, r in got.items()}, window, caps).items():
            page(f, n)
        uow.commit()  # the SKIP LOCKED claim only needs to last while we read; enqueue is idempotent
    # A tenant's turn is shared by its flows that owe something due now: a campaign whose rest waits for quiet
    # hours to end (owed, not due) must not take a share of it (it made a new campaign's turn a third).
    per_tenant: dict[int, int] = {}
    for f in flows:
        if got[f]:
            per_tenant[f.tenant_id] = per_tenant.get(f.tenant_id, 0) + 1
    gaps = {f: fair_plan.gap_ms(per_tenant.get(f.tenant_id, 1)) for f in flows}
    # Interleaved flow by flow, so a page cut short anywhere still holds every flow's oldest rows.
    out: list[tuple[Any, int]] = []
    longest = max((len(r) for r in got.values()), default=0)
    for i in range(longest):
        out += [(got[f][i], gaps[f]) for f in flows if i < len(got[f])]
    return out


def set_tenant_bulk_rate(tenant_id: int, rate: float | None, engine: Engine | None = None) -> bool:
    """A tenant's own cap on its bulk pace (None: the lane's default). False: no such tenant."""
    if rate is not None and not rate > 0:
        raise ValueError("a tenant's bulk rate is a number of messages per second above 0")
    with UnitOfWork(engine) as uow:
        found = uow.execute(sql_reads.SET_TENANT_BULK_RATE, {"tenant_id": tenant_id, "rate": rate}).first()
        uow.commit()
    return found is not None

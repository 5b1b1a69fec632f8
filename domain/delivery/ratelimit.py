"""One token bucket in Redis, shared by every process that names the same key: refilled continuously at `rate` per
second up to `burst`. One script call takes a token or says how long until one is due (the server's clock, so
processes on several machines agree). The bulk lane paces each provider channel with it; the API limits each key,
and each client address's unknown keys (`peek` first: a throttled address costs no database lookup)."""

from __future__ import annotations

from typing import Any, Final

TOKEN_BUCKET: Final[str] = """
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], 60)
return tostring(wait)
"""

PEEK: Final[str] = """
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
if not b[1] then return '0' end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate)
if tokens >= 1 then return '0' end
return tostring((1 - tokens) / rate)
"""


async def take(redis: Any, key: str, rate: float, burst: float) -> float:
    """Take one token now (returns 0.0) or return the seconds until one is due (nothing taken)."""
    return float(await redis.eval(TOKEN_BUCKET, 1, key, rate, burst))


async def peek(redis: Any, key: str, rate: float, burst: float) -> float:
    """Seconds until a token is due (0.0: one is there now); takes nothing."""
    return float(await redis.eval(PEEK, 1, key, rate, burst))


# A reservation, not a race (GCRA): each caller is told its own moment — the next free one, 1/rate after the last
# caller's — and holds it if it is at most `ahead` seconds away; further away it takes nothing and is told how much
# longer to stay away. So a capped tenant's waiting jobs are never all woken for one token at once.
RESERVE: Final[str] = """
local interval, ahead = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local wait = tat - now
if wait > ahead then return tostring(ahead - wait) end
redis.call('SET', KEYS[1], tostring(tat + interval), 'EX', math.ceil(ahead + interval) + 60)
return tostring(wait)
"""


async def reserve(redis: Any, key: str, rate: float, ahead: float) -> float:
    """>= 0: a moment reserved that many seconds from now (sleep, then go). < 0: none; come back in -that seconds."""
    return float(await redis.eval(RESERVE, 1, key, 1.0 / rate, ahead))


# A bulk batch's tokens (jobs/batches.py `deliver_bulk_batch`): up to `want` whole tokens from each of several
# buckets at once, one call for every channel of the batch; returns, per bucket, the tokens taken and the seconds
# until its next one (0 when some were taken). What the batch's claim did not use is put back (`REFUND`): the
# bucket's pace counts the rows claimed, never more.
TAKE_MANY: Final[str] = """
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local out = {}
for i, key in ipairs(KEYS) do
  local b = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(b[1]) or burst
  local ts = tonumber(b[2]) or now
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
  local got = math.min(want, math.floor(tokens))
  local wait = 0
  if got < 1 then got = 0; wait = (1 - tokens) / rate end
  tokens = tokens - got
  redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', tostring(now))
  redis.call('EXPIRE', key, 60)
  out[2 * i - 1] = got
  out[2 * i] = tostring(wait)
end
return out
"""

REFUND: Final[str] = """
local burst = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  local n = tonumber(ARGV[1 + i])
  local tokens = tonumber(redis.call('HGET', key, 'tokens'))
  if n > 0 and tokens then redis.call('HSET', key, 'tokens', tostring(math.min(burst, tokens + n))) end
end
return 0
"""


async def take_many(redis: Any, keys: list[str], rate: float, burst: float, want: int) -> list[tuple[int, float]]:
    """Up to `want` tokens from each bucket of `keys` (same rate and burst): (taken, seconds until one) per key."""
    if not keys:
        return []
    got = await redis.eval(TAKE_MANY, len(keys), *keys, rate, burst, want)
    return [(int(got[2 * i]), float(got[2 * i + 1])) for i in range(len(keys))]


async def refund(redis: Any, unused: dict[str, int], burst: float) -> None:
    """Put back the tokens a batch took and did not use (never above the burst)."""
    keys = [k for k, n in unused.items() if n > 0]
    if keys:
        await redis.eval(REFUND, len(keys), *keys, burst, *[unused[k] for k in keys])


# A capped tenant's moments for a bulk batch: up to `want` reservations (`RESERVE`), each 1/rate after the last,
# none further than `ahead`; returns their waits (seconds from now), in order. `unreserve` gives back the last
# `n` a batch did not use (the tenant's next moment moves back by n intervals, never before now).
RESERVE_MANY: Final[str] = """
local interval, ahead, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local out = {}
while #out < want and tat - now <= ahead do
  out[#out + 1] = tostring(tat - now)
  tat = tat + interval
end
if #out > 0 then redis.call('SET', KEYS[1], tostring(tat), 'EX', math.ceil(ahead + interval) + 60) end
return out
"""

UNRESERVE: Final[str] = """
local back = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]))
if tat then redis.call('SET', KEYS[1], tostring(math.max(now, tat - back)), 'KEEPTTL') end
return 0
"""


async def reserve_many(redis: Any, key: str, rate: float, ahead: float, want: int) -> list[float]:
    """Up to `want` moments of the tenant's pace, the first at once or when due, none beyond `ahead` seconds."""
    got = await redis.eval(RESERVE_MANY, 1, key, 1.0 / rate, ahead, want)
    return [float(w) for w in got]


async def unreserve(redis: Any, key: str, rate: float, n: int) -> None:
    if n > 0:
        await redis.eval(UNRESERVE, 1, key, n / rate)

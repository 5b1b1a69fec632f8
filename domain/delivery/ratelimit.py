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

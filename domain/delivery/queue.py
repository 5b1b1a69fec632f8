"""The queue vocabulary, in one place: lanes, queue names, job ids, the NOTIFY channel, pub/sub channels and every
Redis key prefix. Everything that names a lane, a job or a channel imports it from here (arq's `constants.py`);
the lane CHECK constraint of `notifications` is built from `LANES` too.
"""

from __future__ import annotations

from typing import Final

# Lanes, the NOTIFY channel and job ids are the domain's shared words (`domain.vocabulary`): handed on from here.
from domain.vocabulary import ARMED_FAULTS as ARMED_FAULTS
from domain.vocabulary import JOB_ID_SQL as JOB_ID_SQL
from domain.vocabulary import LANES as LANES
from domain.vocabulary import NOTIFY_CHANNEL as NOTIFY_CHANNEL
from domain.vocabulary import NOTIFY_OWED as NOTIFY_OWED
from domain.vocabulary import Lane as Lane
from domain.vocabulary import is_lane as is_lane
from domain.vocabulary import job_id as job_id
from domain.vocabulary import lanes_sql_list as lanes_sql_list

QUEUE_PREFIX: Final[str] = "outbox:queue:"
API_RATE_KEY: Final[str] = "outbox:rate:api:"  # + a digest of the API key: one bucket per key
RATE_KEY: Final[str] = "outbox:rate:bulk"  # + ":<channel>": one token bucket per provider channel
# + "<tenant id>": a capped tenant's bulk bucket, taken before the channel's (domain/delivery/fair_queue.py).
TENANT_RATE_KEY: Final[str] = "outbox:rate:bulk-tenant:"
# A hash, "<tenant>:<campaign>" -> the score of that flow's last bulk wake-up (fair queueing, fair_queue.py).
FAIR_TAGS_KEY: Final[str] = "outbox:fair:bulk"
REFRESH_PREFIX: Final[str] = "outbox:refresh:"
REFRESH_PUBLISHES: Final[str] = "outbox:metrics:refresh_publishes"
# + ":<host>:<pid>": a hash, refresh channel -> live views one dashboard process has open (dashboard/live.py).
LIVE_VIEWS_KEY: Final[str] = "outbox:live:views"
# Development-only switches a test or drill flips at runtime, read by every process of the system: members are
# "refresh_publish" (no pub/sub refresh hints) and "view_check" (no periodic revision checks of open views).
SWITCHED_OFF: Final[str] = "outbox:dev:switched_off"
# Redis pub/sub, + "<db>:<lane>": a wake-up just enqueued on that lane's queue (jobs/wake.py). Pub/sub ignores the
# database number, so the channel carries it (a benchmark on db 4 never wakes the demo's workers on db 0). A hint
# only: a worker that misses it still polls its queue at least every second; the relay's scan rebuilds lost jobs.
WAKE_PREFIX: Final[str] = "outbox:wake:"
# The one arq task every lane runs, and the bulk lane's campaign fan-out.
DELIVER_TASK: Final[str] = "deliver"
FAN_OUT_TASK: Final[str] = "fan_out_campaign"


def fan_out_job_id(campaign_id: int) -> str:
    return f"campaign-{campaign_id}"


def job_timeout_seconds(lane: str) -> int:
    """arq's job timeout per lane (the relay reads it to tell a dead worker from a long queue)."""
    return 600 if lane == "bulk" else 60  # a bulk job may run a campaign fan-out: seconds per 5,000 rows


def queue_name(lane: str) -> str:
    if not is_lane(lane):
        raise ValueError(f"unknown lane {lane!r}; lanes are {', '.join(LANES)}")
    return QUEUE_PREFIX + lane


def wake_channel(lane: str, db: int) -> str:
    return f"{WAKE_PREFIX}{db}:{lane}"


def order_channel(tenant_id: int, order_id: int) -> str:
    return f"{REFRESH_PREFIX}tenant:{tenant_id}:order:{order_id}"


def tenant_channel(tenant_id: int) -> str:
    return f"{REFRESH_PREFIX}tenant:{tenant_id}"


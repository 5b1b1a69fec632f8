"""Process configuration: one validated model, read from the environment once per process and cached.

Every process (dashboard, relay, lane workers, CLI, tests) reads the same `OUTBOX_*` variables, so one
`OUTBOX_DATABASE_URL` / `OUTBOX_REDIS_URL` pair points a whole system at its own database and Redis db index.
A bad value stops start-up with `SettingsError` naming the variable. Booleans take the usual spellings
(1/0, true/false, yes/no, on/off). The README's table lists every variable; a test keeps the two equal.
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from domain.access import peers

PREFIX = "OUTBOX_"
# The lanes that may be drained in batches (every lane: the bulk lane's batches are sized by its buckets and shared
# fairly between its flows in the claim itself, jobs/batches.py `deliver_bulk_batch`).
BATCHABLE_LANES = ("critical", "high", "normal", "bulk")


class SettingsError(RuntimeError):
    """A variable is set to something we cannot use. The message names it and says what is expected."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="ignore", populate_by_name=True)

    # production (the default) refuses to start without its secrets and never offers fault switches; the demo and
    # the tests ask for development explicitly.
    env: Literal["development", "production"] = "production"
    database_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/outbox"
    # The same database through a PgBouncer in transaction mode (`outbox up --scale N --pgbouncer` sets it): every
    # pool (the unit of work's engine, the workers' hot pool) connects there, without server-side prepared
    # statements (PgBouncer 1.18 cannot carry them in that mode); LISTEN, CDC replication, migrations and admin
    # stay on OUTBOX_DATABASE_URL (session state). Empty: the pools go straight to PostgreSQL.
    pgbouncer_url: str = Field("", validation_alias="OUTBOX_PGBOUNCER_URL")
    redis_url: str = "redis://127.0.0.1:6379/0"
    receiver_url: str = "http://127.0.0.1:8090"
    app_url: str = "http://127.0.0.1:3000"
    # Standard Webhooks secrets ("whsec_" + base64): required in production; demo values in development only.
    webhook_secret: str = ""
    receipt_secret: str = ""
    # Derives one-time codes (never stored) and keys their check hashes.
    otp_secret: str = ""
    # Bearer token for /metrics: required in production (development leaves /metrics open).
    metrics_token: str = ""
    lease_seconds: float = Field(30.0, gt=0)
    scan_interval: float = Field(5.0, gt=0)
    # Wake-ups the relay keeps in Redis per lane (its oldest owed rows); the rest wait in PostgreSQL, in order.
    relay_window: int = Field(2000, ge=10, validation_alias="OUTBOX_RELAY_WINDOW")
    # Messages per second through the bulk lane per provider channel, shared by every bulk worker (token bucket).
    # The default leaves the mock provider headroom on a 2-core machine (its capacity: evidence/bench.md, lanes).
    bulk_rate_per_second: float = Field(100.0, gt=0, validation_alias="OUTBOX_BULK_RATE")
    # Every tenant's bulk pace capped at this (messages per second, all channels; a tenant's own
    # `tenants.bulk_rate_per_second` wins). Unset: a tenant may take the whole lane when it is alone on it.
    bulk_tenant_rate: float | None = Field(None, gt=0, validation_alias="OUTBOX_BULK_TENANT_RATE")
    oldest_owed_slo_seconds: float = Field(60.0, gt=0, validation_alias="OUTBOX_SLO_SECONDS")
    max_attempts: int = Field(8, ge=1)
    # Retention (domain/retention/): days `outbox prune` keeps what is not partitioned, and months of attempts and
    # receipts partitions kept ahead of the current one (by the relay and `outbox partitions ensure`).
    retention_days: float = Field(90.0, gt=0, validation_alias="OUTBOX_RETENTION_DAYS")
    partitions_ahead: int = Field(3, ge=1, le=24, validation_alias="OUTBOX_PARTITIONS_AHEAD")
    backoff_base: float = Field(1.0, gt=0)
    backoff_cap: float = Field(300.0, gt=0)
    max_body_bytes: int = Field(65536, ge=1024)
    # The reverse proxies whose X-Forwarded-For we believe (addresses or CIDRs, comma-separated): the client counted
    # by the login throttle and the unknown-key gate is then the right-most forwarded address that is not one of
    # them (domain/access/peers.py). Empty: nobody is trusted, the connection's peer is the client (fail closed).
    # `outbox up --scale` adds the nginx it starts for its backends.
    trusted_proxies: str = ""
    # Requests per second per API key (bursts of twice that); above it the API answers 429 with Retry-After.
    api_rate_per_second: float = Field(50.0, gt=0, validation_alias="OUTBOX_API_RATE")
    # Live views (open tabs) one dashboard process fans its one Redis subscription out to; beyond it, not live.
    live_views_max: int = Field(2000, ge=1, validation_alias="OUTBOX_LIVE_VIEWS_MAX")
    # Journey delays are divided by this: 600 turns a 30-minute nudge into 3 seconds (demos and tests only).
    time_scale: float = Field(1.0, gt=0, le=100_000)
    # Fault switches on /ops and the receiver's /faults. Unset: on in development, off in production (where it
    # cannot be turned on).
    dev_mode: bool | None = None
    # The API's interactive docs and OpenAPI schema (/api/docs, /api/openapi.json). Unset: served in development,
    # not in production (an attacker's map of the API); production may opt in.
    api_docs: bool | None = Field(None, validation_alias="OUTBOX_API_DOCS")
    # Development only: webhook endpoint targets (host:port, comma-separated) let past the private-address guard;
    # the receiver's own host:port always is, in development (domain/endpoints/urls.py).
    endpoint_allowlist: str = ""
    # A webhook endpoint's circuit breaker (domain/endpoints/breaker.py): this many failed attempts in a row open it
    # (its sends are deferred, not attempted) for the cooldown, then one probe goes; a success closes it. This many
    # failed attempts in a row, spread over at least these minutes, disable the endpoint: what it still owes is
    # settled unsent with the reason, and an operator alert is recorded.
    endpoint_breaker_failures: int = Field(5, ge=1)
    endpoint_breaker_cooldown: float = Field(60.0, gt=0)
    endpoint_disable_failures: int = Field(20, ge=1)
    endpoint_disable_minutes: float = Field(60.0, ge=0)
    # Every process's structured log lines (domain/logs.py) at this level and above.
    log_level: str = Field("INFO", pattern=r"^(?i:debug|info|warning|error|critical)$")
    # Comma-separated fault points (domain/faults.py) at which this process dies: development and tests only.
    fault: str = ""
    # The two fast paths, on unless a test or drill turns one off (development only): the transient refresh hint on
    # Redis pub/sub after a commit, and the wake-up enqueued after a commit. Off, the system still converges: open
    # views by their periodic check, owed messages by the relay's scan.
    refresh_publish: bool = True
    wake_after_commit: bool = True
    # Seconds between an open view's revision checks (one small indexed read per watched order or order list): the
    # safety net that reloads a view whose hint was lost. At most the relay's default scan interval.
    view_check_interval: float = Field(2.0, gt=0, le=60)
    # Batched delivery (jobs/batches.py `drain`): these lanes are drained by resident loops in their lane worker,
    # each claiming up to a batch of due rows in one statement and recording them in one; their wake-up names the
    # lane, never a row (no per-row arq job). Empty: the per-row path (one arq job per message) for every lane. One
    # value for the whole system: the processes that enqueue and the lane workers must agree.
    # `OUTBOX_BATCH_LANES=` (empty) goes back to one arq job per message on every lane
    # (tests/integration/test_delivery_batch.py covers both). The bulk lane's
    # batch takes its size from the channel's bucket and the capped tenants' moments (up to OUTBOX_BATCH_SIZE_BULK
    # tokens at once) and shares itself fairly between the lane's (tenant, campaign) flows in its claim. In the
    # default since 2026-12-04 (the whole suite and `outbox chaos --duration 120` with it; a quiet bench: the
    # campaign at 0.68 of min(bucket, provider) against 0.38 per row, a small campaign beside a big one 1.23× its
    # time alone against 2.03); left out of the list, bulk keeps one fairly scored arq job per row
    # (domain/delivery/fair_queue.py).
    batch_lanes: str = Field("critical,high,normal,bulk", validation_alias="OUTBOX_BATCH_LANES")
    # Rows per claim and drain loops per worker process: the critical lane's batches stay small (a one-time code
    # never waits behind 31 others' sends), with more loops; the high and normal lanes' are wide.
    batch_size: int = Field(32, ge=1, le=500, validation_alias="OUTBOX_BATCH_SIZE")
    batch_loops: int = Field(2, ge=1, le=32, validation_alias="OUTBOX_BATCH_LOOPS")
    batch_size_critical: int = Field(4, ge=1, le=500, validation_alias="OUTBOX_BATCH_SIZE_CRITICAL")
    batch_loops_critical: int = Field(4, ge=1, le=32, validation_alias="OUTBOX_BATCH_LOOPS_CRITICAL")
    batch_size_bulk: int = Field(32, ge=1, le=500, validation_alias="OUTBOX_BATCH_SIZE_BULK")
    batch_loops_bulk: int = Field(2, ge=1, le=32, validation_alias="OUTBOX_BATCH_LOOPS_BULK")
    # Seconds one drain loop per worker waits for a wake-up before it claims anyway (a lost wake-up, a retry come
    # due). 0: none polls; only wake-ups bring a claim (the relay's scan wakes a lane that owes a due row).
    batch_idle_poll: float = Field(1.0, ge=0, le=60, validation_alias="OUTBOX_BATCH_IDLE_POLL")

    # Change-data capture (jobs/cdc.py, docs/relays.md): `outbox up` starts the CDC relay and the fulfilment service
    # only when asked (the cluster must run wal_level = logical); the slot it reads and the Redis Stream it feeds.
    cdc: bool = Field(False, validation_alias="OUTBOX_CDC")
    cdc_slot: str = Field("outbox_cdc", pattern=r"^[a-z0-9_]{1,63}$", validation_alias="OUTBOX_CDC_SLOT")
    cdc_stream: str = Field("outbox:cdc:events", min_length=1, validation_alias="OUTBOX_CDC_STREAM")
    # The fulfilment service's database, read by `outbox check` (its inbox); empty: ours suffixed `_fulfilment`, as
    # `outbox up` gives it.
    cdc_fulfilment_database_url: str = Field("", validation_alias="OUTBOX_CDC_FULFILMENT_DATABASE_URL")

    @field_validator("pgbouncer_url")
    @classmethod
    def _pgbouncer_url(cls, v: str) -> str:
        v = v.strip()
        if v and not v.startswith("postgresql+psycopg://"):
            raise ValueError("expected a postgresql+psycopg:// URL of the same database through PgBouncer, or empty")
        return v

    @property
    def pooled_database_url(self) -> str:
        """Where the pools connect: through PgBouncer when one is configured, else straight to PostgreSQL."""
        return self.pgbouncer_url or self.database_url

    @field_validator("batch_lanes")
    @classmethod
    def _batch_lanes(cls, v: str) -> str:
        lanes = [x.strip() for x in v.split(",") if x.strip()]
        bad = [x for x in lanes if x not in BATCHABLE_LANES]
        if bad:
            raise ValueError(f"not a batchable lane: {', '.join(bad)} (one of {', '.join(BATCHABLE_LANES)})")
        return ",".join(lanes)

    @property
    def batched_lanes(self) -> frozenset[str]:
        return frozenset(x for x in self.batch_lanes.split(",") if x)

    def batch_shape(self, lane: str) -> tuple[int, int]:
        """(rows per claim, drain loops) of a batched lane."""
        if lane == "critical":
            return self.batch_size_critical, self.batch_loops_critical
        if lane == "bulk":
            return self.batch_size_bulk, self.batch_loops_bulk
        return self.batch_size, self.batch_loops

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: str) -> str:
        return ",".join(str(n) for n in peers.parse_networks(v))  # ValueError names the bad entry

    @property
    def trusted_networks(self) -> tuple[peers.Network, ...]:
        return peers.parse_networks(self.trusted_proxies)

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Field name -> the environment variable that sets it."""
        out = {}
        for name, f in cls.model_fields.items():
            alias = f.validation_alias
            out[name] = alias if isinstance(alias, str) else PREFIX + name.upper()
        return out


DEMO_SECRETS: dict[str, str] = {
    "webhook_secret": "whsec_b3V0Ym94LWRlbW8td2ViaG9vay1zZWNyZXQtMDAwMQ==",
    "receipt_secret": "whsec_b3V0Ym94LWRlbW8tcmVjZWlwdC1zZWNyZXQtMDAwMg==",
    "otp_secret": "outbox-demo-otp-secret-0003",
    "metrics_token": "",
}


def _fail_closed(s: Settings) -> Settings:
    """Development fills in the demo secrets and turns the fault switches on unless told otherwise; production
    refuses to start without real secrets, names each missing variable, and refuses development-only switches."""
    names = Settings.env_names()
    if s.env == "development":
        fill = {k: v for k, v in DEMO_SECRETS.items() if not getattr(s, k)}
        return s.model_copy(update={**fill, "dev_mode": True if s.dev_mode is None else s.dev_mode,
                                    "api_docs": True if s.api_docs is None else s.api_docs})
    problems = [f"{names[k]} is not set" if not getattr(s, k) else f"{names[k]} is the published demo value"
                for k, demo in DEMO_SECRETS.items() if not getattr(s, k) or getattr(s, k) == demo]
    if s.dev_mode:
        problems.append(f"{names['dev_mode']} needs OUTBOX_ENV=development (fault switches never run in production)")
    if s.fault:
        problems.append(f"{names['fault']} needs OUTBOX_ENV=development (no injected faults in production)")
    problems += [f"{names[k]}=0 needs OUTBOX_ENV=development (production runs with both fast paths)"
                 for k in ("refresh_publish", "wake_after_commit") if not getattr(s, k)]
    if problems:
        raise SettingsError("OUTBOX_ENV=production refuses to start: " + "; ".join(problems)
                            + ". Set them, or OUTBOX_ENV=development for the demo and tests.")
    return s.model_copy(update={"dev_mode": False, "api_docs": bool(s.api_docs)})


def _load() -> Settings:
    try:
        return _fail_closed(Settings())
    except ValidationError as exc:
        names = Settings.env_names()
        lines = []
        for e in exc.errors():
            field = str(e["loc"][0]) if e["loc"] else "?"
            var = names.get(field, field if field.startswith(PREFIX) else PREFIX + field.upper())
            lines.append(f"{var}={e.get('input')!r}: {e['msg']}")
        raise SettingsError("bad configuration — " + "; ".join(lines)) from None


@functools.cache
def get_settings() -> Settings:
    """The process's settings, validated on first use and then cached."""
    return _load()


def reload_settings() -> Settings:
    """For code that points this very process at another environment (isolated test and scenario systems)."""
    get_settings.cache_clear()
    return get_settings()

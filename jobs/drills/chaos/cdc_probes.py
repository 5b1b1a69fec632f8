"""Where the CDC chaos run's pieces are and what they say: our database and its slot (lag, confirmed position, the
same slot after a restart), the fulfilment service's inbox, the stream's consumer group (drained or not).
"""

from __future__ import annotations

from typing import Any, cast

import psycopg
import redis as redis_lib

from domain.cdc import slot
from jobs import cdc
from jobs.ops.procs import fulfilment_env

GROUP = "fulfilment"
ACTOR = "chaos-cdc"  # the events this run committed (the seed's own came before the slot)


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


class Path_:
    """Where the run's pieces are: our database, the fulfilment service's, the stream, the slot."""

    def __init__(self, env: dict[str, str], redis_port: int) -> None:
        self.ours = env["OUTBOX_DATABASE_URL"]
        self.fulfilment = fulfilment_env(env)["FULFILMENT_DATABASE_URL"]
        self.slot = env.get("OUTBOX_CDC_SLOT", "outbox_cdc")
        self.stream = env.get("OUTBOX_CDC_STREAM", "outbox:cdc:events")
        self.redis_port = redis_port

    def slot_lag(self) -> slot.SlotLag | None:
        try:
            with cdc.connect(self.ours) as c:
                return slot.lag(c, self.slot)
        except psycopg.OperationalError:
            return None

    def slot_from_before(self, lsn: str) -> bool:
        """The slot exists and its restart point is at or before `lsn`: the same slot, not one made since."""
        with cdc.connect(self.ours) as c:
            row = c.execute("SELECT restart_lsn <= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                            (lsn, self.slot)).fetchone()
        return bool(row and row[0])

    def slot_ready(self) -> bool:
        lag = self.slot_lag()
        return lag is not None and lag.confirmed_lsn not in ("", "None")

    def current_lsn(self) -> str:
        with cdc.connect(self.ours) as c:
            row = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def confirmed_past(self, lsn: str) -> bool:
        try:
            with cdc.connect(self.ours) as c:
                row = c.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                                "WHERE slot_name = %s", (lsn, self.slot)).fetchone()
            return bool(row and row[0])
        except psycopg.OperationalError:
            return False

    def drained(self) -> bool:
        """Every committed event is in the inbox and the group owes nothing (nothing pending, nothing unread)."""
        try:
            with psycopg.connect(libpq(self.ours), connect_timeout=2) as c:
                committed = {str(r[0]) for r in c.execute("SELECT event_id FROM outbox_events WHERE actor_ref = %s",
                                                          (ACTOR,))}
            with psycopg.connect(libpq(self.fulfilment), connect_timeout=2) as f:
                seen = {str(r[0]) for r in f.execute("SELECT event_id FROM inbox")}
            r = redis_lib.Redis(port=self.redis_port, socket_timeout=2)
            try:
                groups = {g["name"].decode(): g for g in cast(list[dict[str, Any]], r.xinfo_groups(self.stream))}
            finally:
                r.close()
        except (psycopg.Error, redis_lib.RedisError):
            return False
        g = groups.get(GROUP)
        return bool(committed) and committed <= seen and g is not None and int(g["pending"]) == 0 \
            and int(g.get("lag") or 0) == 0

"""The CDC path end to end on real engines: a PostgreSQL cluster of this module's own with wal_level = logical (the
system cluster runs replica and is never changed), wal2json, a real Redis Stream, and the fulfilment service's
inbox in its own database on that cluster. Each test names the invariant it protects."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
import pytest
import redis as redis_lib

from domain.cdc import message, slot, views
from fulfilment import consume as fconsume
from fulfilment import db as fdb
from fulfilment import inbox as finbox
from fulfilment import settings as fsettings
from jobs import cdc
from jobs.drills.chaos.owned import (
    OwnedPostgres,
    cluster_home,
    free_port,
    logical_decoding_options,
    remove_cluster_home,
)
from jobs.ops.dbadmin import ensure_database
from jobs.ops.dbadmin import migrate as migrate_outbox
from jobs.ops.procs import BIN, ROOT, System, fulfilment_env, wait_until
from tests.conftest import SLOT_SUFFIX

pytestmark = pytest.mark.services
HOME = f"cdc-test{SLOT_SUFFIX}"
TENANT = 7
REDIS_DB = 13  # the suite's fixed indexes are 3 and 9-12


@dataclass
class Cluster:
    pg: OwnedPostgres
    url: str  # our database (SQLAlchemy form)
    fulfilment_url: str

    @property
    def libpq(self) -> str:
        return self.url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    pg = OwnedPostgres(free_port(), cluster_home(HOME) / "pg", logical_decoding_options())
    try:
        pg.init()
        pg.start()
        url = f"{pg.url}/outbox_cdc"
        ensure_database(url)
        migrate_outbox(url)
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
            c.execute("INSERT INTO tenants (id, name) VALUES (%s, 'cdc tenant')", (TENANT,))
        fulfilment_url = f"{pg.url}/outbox_cdc_fulfilment"
        fdb.migrate(fulfilment_url)
        yield Cluster(pg, url, fulfilment_url)
    finally:
        pg.stop("immediate")
        pg.keep_log(ROOT / ".run" / f"{HOME}-postgres.log")
        remove_cluster_home(HOME)


@dataclass
class Path_:
    """One test's slot, stream and consumer group, on the module's cluster and a clean Redis db."""

    cluster: Cluster
    r: redis_lib.Redis
    slot: str
    stream: str
    relay_conn: psycopg.Connection[tuple[object, ...]]
    inbox_conn: psycopg.Connection[tuple[object, ...]]

    def stream_ids(self) -> list[str]:
        return [f[b"id"].decode() for _id, f in self.r.xrange(self.stream)]

    def relay_until(self, events: int, deadline_s: float = 30) -> None:
        """Relay rounds until the stream holds `events` messages (or the deadline passes)."""
        def enough() -> bool:
            cdc.relay_round(self.relay_conn, self.r, self.slot, self.stream)
            return int(self.r.xlen(self.stream)) >= events
        wait_until(enough, deadline_s, f"{events} messages in {self.stream}")

    def consume_all(self, deadline_s: float = 30, **kw: object) -> fconsume.Tally:
        """Consume until the group has nothing pending and nothing unread."""
        tally = fconsume.Tally()

        def drained() -> bool:
            fconsume.consume_once(self.inbox_conn, self.r, tally, block_ms=1, **kw)  # type: ignore[arg-type]
            groups = {g["name"].decode(): g for g in self.r.xinfo_groups(self.stream)}
            g = groups["fulfilment"]
            return int(g["pending"]) == 0 and int(g.get("lag") or 0) == 0
        wait_until(drained, deadline_s, "the fulfilment group to drain the stream")
        return tally

    def counts(self) -> dict[str, int]:
        return finbox.counts(self.inbox_conn)

    def slot_lsn(self) -> str:
        lag = slot.lag(self.relay_conn, self.slot)
        assert lag is not None
        return lag.confirmed_lsn


@pytest.fixture
def path(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path_]:
    tag = uuid.uuid4().hex[:8]
    base = os.environ.get("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
    redis_url = f"{base}/{REDIS_DB}"
    r = redis_lib.Redis.from_url(redis_url)
    r.flushdb()
    stream = f"test:cdc:{tag}"
    for k, v in {"DATABASE_URL": cluster.fulfilment_url, "REDIS_URL": redis_url, "STREAM": stream,
                 "GROUP": "fulfilment", "CONSUMER": "c1", "BLOCK_MS": "1", "CLAIM_IDLE_MS": "60000",
                 "FAULT": ""}.items():
        monkeypatch.setenv(f"FULFILMENT_{k}", v)
    fsettings.get_settings.cache_clear()
    relay_conn = cdc.connect(cluster.url)
    slot_name = f"t_{tag}"
    cdc.prepare(relay_conn, slot_name)
    inbox_conn = fdb.connect(cluster.fulfilment_url)
    with inbox_conn.transaction():
        inbox_conn.execute("TRUNCATE inbox, fulfilments, gaps, refusals")
    p = Path_(cluster, r, slot_name, stream, relay_conn, inbox_conn)
    try:
        yield p
    finally:
        slot.drop(p.relay_conn, slot_name)  # a test may have replaced the connections (a restart)
        p.relay_conn.close()
        p.inbox_conn.close()
        r.flushdb()
        r.close()
        fsettings.get_settings.cache_clear()


def insert_event(c: psycopg.Connection[tuple[object, ...]], aggregate_id: str, revision: int,
                 event_type: str = "order.approved", payload: dict[str, object] | None = None) -> str:
    """What an order command writes into the outbox (the producer side, as domain/orders/sql.py does)."""
    event_id = str(uuid.uuid4())
    c.execute(
        "INSERT INTO outbox_events (event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, "
        "event_type, schema_version, occurred_at, request_id, causation_id, actor_ref, payload, digest) "
        "VALUES (%s, %s, 'order', %s, %s, %s, 1, %s, 'req', NULL, 'test', %s, 'sha256:x')",
        (event_id, TENANT, aggregate_id, revision, event_type, datetime.now(UTC),
         json.dumps(payload or {"order_id": aggregate_id, "status": "approved", "revision": revision})))
    return event_id


def producer(cluster: Cluster) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(cluster.libpq, autocommit=True)


def test_stream_preserves_commit_order_and_debezium_fields(path: Path_) -> None:
    """Invariant: the stream carries each committed event once per relay read, in COMMIT order (not insert order),
    one transaction's events in the order it wrote them, with exactly Debezium's outbox router fields plus ours."""
    a, b = producer(path.cluster), producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    with a.transaction():
        first_inserted = insert_event(a, f"{agg}-a", 1)
        with b.transaction():
            committed_first = insert_event(b, f"{agg}-b", 1)
        # b has committed; a commits after it
    with a.transaction():
        z1 = insert_event(a, f"{agg}-z", 1)
        z2 = insert_event(a, f"{agg}-z", 2)
    path.relay_until(4)
    assert path.stream_ids() == [committed_first, first_inserted, z1, z2]
    _id, fields = path.r.xrange(path.stream)[0]
    decoded = {k.decode(): v.decode() for k, v in fields.items()}
    assert tuple(decoded) == message.FIELDS
    assert decoded["aggregatetype"] == "order" and decoded["aggregateid"] == f"{agg}-b"
    assert decoded["tenant"] == str(TENANT) and decoded["revision"] == "1" and decoded["schemaversion"] == "1"
    assert json.loads(decoded["payload"])["status"] == "approved"
    # Confirmed past everything read: nothing more to relay.
    assert cdc.relay_round(path.relay_conn, path.r, path.slot, path.stream).events == 0
    a.close()
    b.close()


def test_slot_confirmed_only_after_xadd_kill_between_gives_duplicates_not_double_effects(path: Path_) -> None:
    """Invariant: the slot moves past an event only after the stream has it. The real relay process killed between
    XADD and confirm (OUTBOX_FAULT) leaves the slot where it was; the next relay publishes the same events again
    (identical messages), and the inbox projects each event exactly once."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    ids = [insert_event(c, agg, rev) for rev in (1, 2, 3)]
    before = path.slot_lsn()
    env = {**os.environ, "OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": path.cluster.url,
           "OUTBOX_REDIS_URL": path.r.connection_pool.connection_kwargs and
           f"redis://127.0.0.1:{path.r.connection_pool.connection_kwargs['port']}/{REDIS_DB}",
           "OUTBOX_CDC_SLOT": path.slot, "OUTBOX_CDC_STREAM": path.stream,
           "OUTBOX_FAULT": cdc.FAULT_POINT}
    killed = subprocess.run([str(BIN / "outbox"), "cdc-relay", "--once"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == 86, killed.stderr[-2000:]
    assert path.stream_ids() == ids  # published ...
    assert path.slot_lsn() == before  # ... and not confirmed
    env["OUTBOX_FAULT"] = ""
    again = subprocess.run([str(BIN / "outbox"), "cdc-relay", "--once"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0, again.stderr[-2000:]
    assert path.stream_ids() == ids + ids  # at least once: the same three again, in the same order
    entries = path.r.xrange(path.stream)
    assert [f for _i, f in entries[:3]] == [f for _i, f in entries[3:]]  # identical messages
    assert path.slot_lsn() != before
    tally = path.consume_all()
    assert tally.outcomes == {"applied": 3, "duplicate": 3}
    counts = path.counts()
    assert counts["applied"] == 3 and counts["projected_twice"] == 0 and counts["refusals"] == 0
    checked = subprocess.run([str(BIN / "python"), "-m", "fulfilment", "check"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "FULFILMENT_DATABASE_URL": path.cluster.fulfilment_url})
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert json.loads(checked.stdout)["applied"] == 3
    with path.inbox_conn.transaction():  # break the invariant on purpose: the check must say so
        path.inbox_conn.execute("UPDATE fulfilments SET applied_events = applied_events + 1")
    broken = subprocess.run([str(BIN / "python"), "-m", "fulfilment", "check"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "FULFILMENT_DATABASE_URL": path.cluster.fulfilment_url})
    assert broken.returncode == 1 and json.loads(broken.stdout)["projected_twice"] == 1
    c.close()


def test_redelivery_after_commit_before_ack_changes_nothing(path: Path_) -> None:
    """Invariant: an event applied and committed but never acknowledged (consumer killed before XACK) is read again
    and changes nothing: the inbox's UNIQUE(event_id) in the projection's transaction."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    insert_event(c, agg, 1)
    path.relay_until(1)

    class Killed(Exception):
        pass

    def die() -> None:
        raise Killed

    tally = fconsume.Tally()
    with pytest.raises(Killed):
        fconsume.consume_once(path.inbox_conn, path.r, tally, block_ms=1, after_commit=die)
    assert int(path.r.xpending(path.stream, "fulfilment")["pending"]) == 1  # committed, not acknowledged
    assert path.counts()["applied"] == 1
    again = path.consume_all()
    assert again.outcomes == {"duplicate": 1}
    counts = path.counts()
    assert counts["inbox"] == 1 and counts["applied"] == 1 and counts["projected_twice"] == 0
    with path.inbox_conn.transaction():
        row = path.inbox_conn.execute("SELECT revision, applied_events FROM fulfilments WHERE aggregate_id = %s",
                                      (agg,)).fetchone()
    assert row == (1, 1)
    c.close()


def test_skipped_revision_is_a_gap_and_never_projected_past(path: Path_) -> None:
    """Invariant: per aggregate, revisions apply in order; a revision skipped is reported as a gap and the later
    one waits (parked) instead of being projected past it; when the missing one arrives both apply, in order."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    insert_event(c, agg, 1)
    insert_event(c, agg, 3, event_type="order.fulfilled", payload={"status": "fulfilled"})
    path.relay_until(2)
    tally = path.consume_all()
    assert tally.outcomes == {"applied": 1, "parked": 1}
    counts = path.counts()
    assert counts["open_gaps"] == 1 and counts["parked"] == 1
    with path.inbox_conn.transaction():
        assert path.inbox_conn.execute("SELECT revision FROM fulfilments WHERE aggregate_id = %s",
                                       (agg,)).fetchone() == (1,)
        assert path.inbox_conn.execute("SELECT missing_revision, seen_revision FROM gaps WHERE aggregate_id = %s",
                                       (agg,)).fetchall() == [(2, 3)]
    insert_event(c, agg, 2, event_type="order.packed", payload={"status": "packed"})
    path.relay_until(3)
    assert path.consume_all().outcomes == {"applied": 1}
    counts = path.counts()
    assert counts["open_gaps"] == 0 and counts["parked"] == 0 and counts["applied"] == 3
    assert counts["projected_twice"] == 0
    with path.inbox_conn.transaction():
        assert path.inbox_conn.execute("SELECT revision, status, applied_events FROM fulfilments "
                                       "WHERE aggregate_id = %s", (agg,)).fetchone() == (3, "fulfilled", 3)
    c.close()


def test_identity_conflict_is_refused_and_counted(path: Path_) -> None:
    """Invariant: an event id seen again with another body (digest) is refused and counted; the projection keeps
    the first body's effect."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    insert_event(c, agg, 1)
    path.relay_until(1)
    path.consume_all()
    _id, fields = path.r.xrange(path.stream)[0]
    forged = {k.decode(): v.decode() for k, v in fields.items()}
    forged["payload"] = json.dumps({"status": "cancelled"})
    path.r.xadd(path.stream, forged)  # type: ignore[arg-type]
    assert path.consume_all().outcomes == {"conflict": 1}
    counts = path.counts()
    assert counts["refusals"] == 1 and counts["applied"] == 1
    with path.inbox_conn.transaction():
        assert path.inbox_conn.execute("SELECT status FROM fulfilments WHERE aggregate_id = %s",
                                       (agg,)).fetchone() == ("approved",)
    c.close()


def test_relay_fails_closed_where_wal_level_is_not_logical() -> None:
    """Invariant: where logical decoding is off, the CDC relay changes nothing and exits saying exactly what to run
    (the system cluster runs wal_level = replica; the relay only reads the setting there)."""
    base = os.environ.get("OUTBOX_PG_BASE", "postgresql+psycopg://postgres@127.0.0.1:5432")
    with psycopg.connect(f"{base.replace('postgresql+psycopg://', 'postgresql://')}/postgres") as c:
        row = c.execute("SELECT current_setting('wal_level')").fetchone()
    if row is not None and row[0] == "logical":
        pytest.skip("the system cluster runs wal_level = logical: nothing to refuse")
    env = {**os.environ, "OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": f"{base}/postgres"}
    p = subprocess.run([str(BIN / "outbox"), "cdc-relay"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == cdc.EXIT_UNAVAILABLE
    assert "ALTER SYSTEM SET wal_level = logical" in p.stderr and "restart PostgreSQL" in p.stderr


def test_the_processes_outbox_up_starts_project_every_event_once_through_a_consumer_crash(path: Path_) -> None:
    """Invariant: the CDC relay and the fulfilment service as `outbox up` starts them (OUTBOX_CDC, procs.System)
    carry every committed event into the projection exactly once, even when the consumer process dies between its
    commit and XACK (FULFILMENT_FAULT) and is started again."""
    port = path.r.connection_pool.connection_kwargs["port"]
    env = {**os.environ, "OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": path.cluster.url.rsplit("/", 1)[0]
           + "/outbox_cdc", "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{port}/{REDIS_DB}", "OUTBOX_CDC_SLOT": path.slot,
           "OUTBOX_CDC_STREAM": path.stream, "FULFILMENT_CONSUMER": "up-1", "FULFILMENT_BLOCK_MS": "100"}
    env = {k: v for k, v in env.items() if not k.startswith("FULFILMENT_") or k in (
        "FULFILMENT_CONSUMER", "FULFILMENT_BLOCK_MS")}  # what the test's own fixture set is not the service's
    # Derived from ours, as `outbox up` hands it over: the service's own database, our Redis, our stream.
    assert fulfilment_env(env)["FULFILMENT_DATABASE_URL"] == path.cluster.fulfilment_url
    assert fulfilment_env(env)["FULFILMENT_STREAM"] == path.stream
    system = System(env, ROOT / ".run" / f"{HOME}-logs")
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    try:
        system.cdc_relay()
        crashing = system._proc("fulfilment", [str(BIN / "python"), "-m", "fulfilment", "consume"],
                                {**fulfilment_env(env), "FULFILMENT_FAULT": fconsume.FAULT_AFTER_COMMIT})
        insert_event(c, agg, 1)
        assert crashing.wait_exit(60) == fconsume.EXIT_FAULT  # committed, then died before XACK
        system.fulfilment()
        for rev in (2, 3):
            insert_event(c, agg, rev)

        def projected() -> bool:
            with path.inbox_conn.transaction():
                row = path.inbox_conn.execute("SELECT revision FROM fulfilments WHERE aggregate_id = %s",
                                              (agg,)).fetchone()
            return row == (3,)
        wait_until(projected, 60, "the projection to reach revision 3")
        wait_until(lambda: int(path.r.xpending(path.stream, "fulfilment")["pending"]) == 0, 30, "every XACK")
        counts = path.counts()
        assert counts["applied"] == 3 and counts["inbox"] == 3 and counts["projected_twice"] == 0
        assert counts["open_gaps"] == 0 and counts["refusals"] == 0
    finally:
        system.stop_all()
        c.close()


def test_lag_counts_what_the_group_has_not_acknowledged_and_the_slot_keeps(path: Path_) -> None:
    """Invariant: the lag the CDC path reports is what is really owed — WAL the slot keeps until the relay confirms,
    then every message the group has not acknowledged (never delivered or pending) with the oldest one's age —
    and it drops to zero only when the projection has every event."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    before = views.cdc_lag(path.relay_conn, path.r, path.slot, path.stream, "fulfilment")
    for rev in (1, 2, 3):
        insert_event(c, agg, rev)
    unrelayed = views.cdc_lag(path.relay_conn, path.r, path.slot, path.stream, "fulfilment")
    assert unrelayed.slot_behind_bytes > before.slot_behind_bytes and unrelayed.stream_length == 0
    path.relay_until(3)
    relayed = views.cdc_lag(path.relay_conn, path.r, path.slot, path.stream, "fulfilment")
    assert relayed.slot_behind_bytes < unrelayed.slot_behind_bytes
    assert relayed.events_behind == 3 and relayed.oldest_unconsumed_age_s is not None
    fconsume.ensure_group(path.r, path.stream, "fulfilment")

    class Killed(Exception):
        pass

    def die() -> None:
        raise Killed

    with pytest.raises(Killed):
        fconsume.consume_once(path.inbox_conn, path.r, fconsume.Tally(), block_ms=1, after_commit=die)
    crashed = views.cdc_lag(path.relay_conn, path.r, path.slot, path.stream, "fulfilment")
    # The consumer took all three in one read and died after committing the first: all three are still owed.
    assert crashed.group_exists and crashed.pending == 3 and crashed.undelivered == 0 and crashed.events_behind == 3
    path.consume_all()
    drained = views.cdc_lag(path.relay_conn, path.r, path.slot, path.stream, "fulfilment")
    assert drained.events_behind == 0 and drained.oldest_unconsumed_age_s is None
    port = path.r.connection_pool.connection_kwargs["port"]
    env = {**os.environ, "OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": path.cluster.url,
           "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{port}/{REDIS_DB}", "OUTBOX_CDC_SLOT": path.slot,
           "OUTBOX_CDC_STREAM": path.stream}
    shown = subprocess.run([str(BIN / "outbox"), "cdc-status"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "events_behind=0" in shown.stdout and "length=3" in shown.stdout
    c.close()


def test_postgresql_restart_keeps_the_slot_and_loses_no_event(path: Path_) -> None:
    """Invariant: the slot is durable — PostgreSQL restarted under a running CDC relay and consumer, the relay
    resumes from the slot's confirmed position: every event committed before and after the restart reaches the
    projection once, in order, with no gap. (It restarts the module's cluster; the other tests open their connections
    per test, so any order holds.)"""
    port = path.r.connection_pool.connection_kwargs["port"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FULFILMENT_")}
    env.update({"OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": path.cluster.url,
                "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{port}/{REDIS_DB}", "OUTBOX_CDC_SLOT": path.slot,
                "OUTBOX_CDC_STREAM": path.stream, "FULFILMENT_BLOCK_MS": "100"})
    system = System(env, ROOT / ".run" / f"{HOME}-logs")
    agg = uuid.uuid4().hex[:6]

    def projected(revision: int) -> Callable[[], bool]:
        def check() -> bool:
            try:
                with fdb.connect(path.cluster.fulfilment_url) as c:
                    return c.execute("SELECT revision FROM fulfilments WHERE aggregate_id = %s",
                                     (agg,)).fetchone() == (revision,)
            except psycopg.OperationalError:
                return False
        return check

    try:
        system.cdc_relay()
        system.fulfilment()
        with producer(path.cluster) as c:
            for rev in (1, 2):
                insert_event(c, agg, rev)
        wait_until(projected(2), 60, "revision 2 projected before the restart")
        path.relay_conn.close()
        path.inbox_conn.close()
        path.cluster.pg.stop("fast")
        path.cluster.pg.start()
        with producer(path.cluster) as c:
            for rev in (3, 4):
                insert_event(c, agg, rev)
        wait_until(projected(4), 90, "revision 4 projected after the restart")
        assert system.procs["cdc-relay"].alive() and system.procs["fulfilment"].alive()  # they waited, not died
    finally:
        system.stop_all()
        path.relay_conn = cdc.connect(path.cluster.url)
        path.inbox_conn = fdb.connect(path.cluster.fulfilment_url)
    counts = path.counts()
    assert counts["applied"] == 4 and counts["projected_twice"] == 0 and counts["open_gaps"] == 0
    assert counts["parked"] == 0 and counts["refusals"] == 0


def test_metrics_report_the_wal_a_slot_keeps_and_a_missing_slot_as_zero(path: Path_,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: /metrics' slot gauges (docs/alerts.yml, OutboxCdcSlotRetainingWal) are the WAL the slot really
    makes PostgreSQL keep — growing while nothing confirms it — and the configured slot's series exists even when
    the slot does not (retaining nothing), so the alert never silently loses its series."""
    from dashboard.api.health import slot_metrics
    from domain.settings import reload_settings

    with monkeypatch.context() as m:
        m.setenv("OUTBOX_DATABASE_URL", path.cluster.url)
        reload_settings()
        try:
            before = {s.slot: s for s in views.slots_wal("not_a_slot")}
            c = producer(path.cluster)
            for rev in (1, 2, 3):
                insert_event(c, uuid.uuid4().hex[:6], rev)
            c.close()
            after = {s.slot: s for s in views.slots_wal("not_a_slot")}
        finally:
            m.undo()
            reload_settings()
    assert before[path.slot].exists and after[path.slot].retained_bytes > before[path.slot].retained_bytes
    assert after[path.slot].wal_status in ("reserved", "extended")
    assert after["not_a_slot"] == views.SlotWal("not_a_slot", False, False, 0, None, "")
    samples = {(m.name, s.labels["slot"]): s.value for m in slot_metrics(list(after.values())) for s in m.samples}
    assert samples[("outbox_cdc_slot_retained_bytes", path.slot)] == after[path.slot].retained_bytes
    assert samples[("outbox_cdc_slot_exists", "not_a_slot")] == 0
    assert samples[("outbox_cdc_slot_lost", path.slot)] == 0


def test_refeed_after_a_lost_slot_fills_the_hole_and_what_was_had_changes_nothing(path: Path_) -> None:
    """Invariant: events committed while no slot existed (a lost slot, a failover before PostgreSQL 17) are in no
    stream; `outbox cdc-refeed --since T` publishes every event since T again, spelt as the relay spells them, so
    the inbox applies the missing ones (in revision order, no gap) and absorbs the rest as duplicates — never as
    identity conflicts. A malformed --since publishes nothing."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    since = datetime.now(UTC)
    for rev in (1, 2):
        insert_event(c, agg, rev)
    path.relay_until(2)
    assert path.consume_all().outcomes == {"applied": 2}
    slot.drop(path.relay_conn, path.slot)  # the slot lost ...
    for rev in (3, 4):
        insert_event(c, agg, rev)  # ... while these commit
    cdc.prepare(path.relay_conn, path.slot)  # a new slot begins after them
    assert cdc.relay_round(path.relay_conn, path.r, path.slot, path.stream).events == 0
    port = path.r.connection_pool.connection_kwargs["port"]
    env = {**os.environ, "OUTBOX_ENV": "development", "OUTBOX_DATABASE_URL": path.cluster.url,
           "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{port}/{REDIS_DB}", "OUTBOX_CDC_STREAM": path.stream}
    bad = subprocess.run([str(BIN / "outbox"), "cdc-refeed", "--since", "yesterday"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "not an ISO time" in bad.stderr + bad.stdout
    assert int(path.r.xlen(path.stream)) == 2
    done = subprocess.run([str(BIN / "outbox"), "cdc-refeed", "--since", since.isoformat()], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "republished 4 events" in done.stdout
    assert path.consume_all().outcomes == {"duplicate": 2, "applied": 2}
    counts = path.counts()
    assert counts["applied"] == 4 and counts["refusals"] == 0 and counts["open_gaps"] == 0
    assert counts["projected_twice"] == 0
    with path.inbox_conn.transaction():
        assert path.inbox_conn.execute("SELECT revision, applied_events FROM fulfilments WHERE aggregate_id = %s",
                                       (agg,)).fetchone() == (4, 4)
    c.close()


def test_failover_before_pg17_loses_the_slot_and_the_refeed_closes_the_hole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant (docs/relays.md, "A primary failover"): on a promoted standby (PostgreSQL < 17, no failover
    slots) the CDC slot is gone, so what committed after its last confirmed position is in no stream — the inbox
    parks what comes after the hole instead of projecting past it — and the documented procedure (a new slot, then
    `cdc-refeed` from before the hole) brings the projection to the last revision with no gap, no refusal and no
    event projected twice."""
    from jobs.drills.replica_pg import SLOT_NAME, Cluster

    options = logical_decoding_options()
    home = cluster_home(f"cdc-failover{SLOT_SUFFIX}")
    primary = Cluster(free_port(), home / "primary", options)
    standby = Cluster(free_port(), home / "standby", options)
    base = os.environ.get("OUTBOX_REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
    r = redis_lib.Redis.from_url(f"{base}/{REDIS_DB}")
    r.flushdb()
    stream, agg, slot_name = f"test:cdc:fo:{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:6], "fo_slot"
    try:
        primary.init()
        primary.start()
        primary.sql(f"SELECT pg_create_physical_replication_slot('{SLOT_NAME}')")
        url, f_url = f"{primary.url}/outbox_fo", f"{primary.url}/outbox_fo_fulfilment"
        ensure_database(url)
        migrate_outbox(url)
        fdb.migrate(f_url)
        primary.sql(f"INSERT INTO tenants (id, name) VALUES ({TENANT}, 'fo')", db="outbox_fo")
        standby.basebackup_from(primary)
        standby.start()
        for k, v in {"DATABASE_URL": f_url, "REDIS_URL": f"{base}/{REDIS_DB}", "STREAM": stream,
                     "GROUP": "fulfilment", "CONSUMER": "c1", "BLOCK_MS": "1", "CLAIM_IDLE_MS": "60000",
                     "FAULT": ""}.items():
            monkeypatch.setenv(f"FULFILMENT_{k}", v)
        fsettings.get_settings.cache_clear()
        since = datetime.now(UTC)

        def consume(inbox_url: str) -> fconsume.Tally:
            tally = fconsume.Tally()
            with fdb.connect(inbox_url) as ic:
                for _ in range(5):
                    fconsume.consume_once(ic, r, tally, block_ms=1)
            return tally

        with cdc.connect(url) as rc, psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as c:
            cdc.prepare(rc, slot_name)
            for rev in (1, 2):
                insert_event(c, agg, rev)
            assert cdc.relay_round(rc, r, slot_name, stream).events == 2
            assert consume(f_url).outcomes == {"applied": 2}
            insert_event(c, agg, 3)  # committed and replicated, never relayed: the hole
            row = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
        wait_until(lambda: standby.sql(f"SELECT pg_last_wal_replay_lsn() >= '{row[0]}'::pg_lsn")[0][0], 60,
                   "the standby to replay the hole")
        primary.stop("immediate")
        standby.promote()
        new_url, new_f_url = f"{standby.url}/outbox_fo", f"{standby.url}/outbox_fo_fulfilment"
        with cdc.connect(new_url) as rc, psycopg.connect(new_url.replace("+psycopg", ""), autocommit=True) as c:
            major = int(str(standby.sql("SELECT current_setting('server_version_num')::int / 10000")[0][0]))
            if major < 17:
                assert slot.lag(rc, slot_name) is None, "a logical slot is not on a promoted standby before PG 17"
            insert_event(c, agg, 4)  # before the relay is back: before its new slot, in no stream either
            if slot.lag(rc, slot_name) is None:
                cdc.prepare(rc, slot_name)
            insert_event(c, agg, 5)
            assert cdc.relay_round(rc, r, slot_name, stream).events == 1
            assert consume(new_f_url).outcomes == {"parked": 1}  # revision 5 waits: 3 and 4 never came
            assert cdc.refeed(rc, r, stream, since) == 5
        tally = consume(new_f_url)
        assert tally.outcomes == {"duplicate": 3, "applied": 2}  # 1, 2 and 5 again; 3 and 4 (and 5 after them)
        with fdb.connect(new_f_url) as ic:
            counts = finbox.counts(ic)
            projected = ic.execute("SELECT revision, applied_events FROM fulfilments WHERE aggregate_id = %s",
                                   (agg,)).fetchone()
        assert projected == (5, 5)
        assert counts["open_gaps"] == 0 and counts["parked"] == 0 and counts["refusals"] == 0
        assert counts["projected_twice"] == 0
    finally:
        fsettings.get_settings.cache_clear()
        r.flushdb()
        r.close()
        for c in (standby, primary):
            c.keep_log(ROOT / ".run" / f"cdc-failover-{c.base.name}.log")
            c.remove()
        remove_cluster_home(f"cdc-failover{SLOT_SUFFIX}")


@contextmanager
def our_settings(path: Path_, monkeypatch: pytest.MonkeyPatch, cdc_on: bool = True) -> Iterator[None]:
    """This process's Settings pointed at the module's cluster, the test's stream and slot (what `outbox check`
    and /ops read), then back."""
    from domain.settings import reload_settings

    port = path.r.connection_pool.connection_kwargs["port"]
    with monkeypatch.context() as m:
        for k, v in {"OUTBOX_DATABASE_URL": path.cluster.url, "OUTBOX_REDIS_URL": f"redis://127.0.0.1:{port}/{REDIS_DB}",
                     "OUTBOX_CDC_SLOT": path.slot, "OUTBOX_CDC_STREAM": path.stream,
                     "OUTBOX_CDC": "true" if cdc_on else "false"}.items():
            m.setenv(k, v)
        m.delenv("OUTBOX_CDC_FULFILMENT_DATABASE_URL", raising=False)  # derived: outbox_cdc -> outbox_cdc_fulfilment
        reload_settings()
        try:
            yield
        finally:
            m.undo()
            reload_settings()


def test_outbox_check_counts_an_event_the_projection_never_saw_once_the_stream_is_drained(
        path: Path_, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant (`outbox check`, CDC checks): with the relay and the consumer run, no event is projected twice and
    every committed order event of the drained stream's window has an inbox row; C2 is counted only once the group
    owes nothing (else "stream not drained"); an inbox row lost is counted (C2, and C1: the projection then holds an
    application the inbox no longer guards); with OUTBOX_CDC off both say "not enabled"."""
    from jobs.ops.checks import cdc_checks

    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    ids = [insert_event(c, agg, rev) for rev in (1, 2, 3)]
    path.relay_until(3)
    fconsume.ensure_group(path.r, path.stream, "fulfilment")
    with our_settings(path, monkeypatch, cdc_on=False):
        assert cdc_checks() == {views.PROJECTED_TWICE: "not enabled", views.NEVER_SEEN: "not enabled"}
    with our_settings(path, monkeypatch):
        owed = cdc_checks(settle_s=0)
        assert owed[views.PROJECTED_TWICE] == 0 and owed[views.NEVER_SEEN] == "stream not drained (3 events behind)"
        path.consume_all()
        assert cdc_checks(settle_s=0) == {views.PROJECTED_TWICE: 0, views.NEVER_SEEN: 0}
        with path.inbox_conn.transaction():
            path.inbox_conn.execute("DELETE FROM inbox WHERE event_id = %s", (ids[1],))
        assert cdc_checks(settle_s=0) == {views.PROJECTED_TWICE: 1, views.NEVER_SEEN: 1}
    c.close()


def test_outbox_check_counts_an_event_committed_but_never_relayed(path: Path_) -> None:
    """Invariant (`outbox check`, C2): an order event committed and never put on the stream (here: the slot moved
    past it unpublished, as a lost slot loses it) is counted once the stream is drained, while nothing is projected
    twice; the settle time keeps the last moments of the window out of the count (a transaction still open)."""
    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    insert_event(c, agg, 1)
    path.relay_until(1)
    insert_event(c, uuid.uuid4().hex[:6], 1)  # this one's WAL is skipped: never in the stream
    row = c.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    slot.advance(path.relay_conn, path.slot, str(row[0]))
    insert_event(c, agg, 2)
    path.relay_until(2)
    assert len(path.stream_ids()) == 2
    path.consume_all()
    with psycopg.connect(path.cluster.libpq, autocommit=True) as ours, \
            views.connect_fulfilment(path.cluster.fulfilment_url) as theirs:
        assert views.projection_checks(ours, theirs, path.r, path.stream, settle_s=0) == {
            views.PROJECTED_TWICE: 0, views.NEVER_SEEN: 1}
        assert views.projection_checks(ours, theirs, path.r, path.stream, settle_s=3600) == {
            views.PROJECTED_TWICE: 0, views.NEVER_SEEN: 0}
    c.close()


def test_ops_cdc_card_reads_the_groups_lag_and_the_slots_wal(path: Path_, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant (/ops, "CDC stream"): the card's figures are the consumer group's real lag — events behind,
    pending (delivered, not acknowledged), the oldest unconsumed one's age — and the WAL the slot keeps; all owed
    drop to 0 once the projection has every event."""
    from dashboard.pages.ops_snapshot import cdc_card

    c = producer(path.cluster)
    agg = uuid.uuid4().hex[:6]
    for rev in (1, 2):
        insert_event(c, agg, rev)
    path.relay_until(2)
    fconsume.ensure_group(path.r, path.stream, "fulfilment")
    with our_settings(path, monkeypatch):
        owed = cdc_card()
        assert owed["cdc_on"] and owed["cdc_behind"] == "2" and owed["cdc_pending"] == "0"
        assert owed["cdc_oldest"].endswith(" s") and owed["cdc_retained"].endswith(" MB")
        assert owed["cdc_state"] == "The projection is 2 event(s) behind."
        path.r.xreadgroup("fulfilment", "c1", {path.stream: ">"}, count=1)  # delivered, never acknowledged
        assert (cdc_card()["cdc_behind"], cdc_card()["cdc_pending"]) == ("2", "1")
        path.consume_all()
        drained = cdc_card()
        assert (drained["cdc_behind"], drained["cdc_pending"], drained["cdc_oldest"]) == ("0", "0", "—")
        assert drained["cdc_state"].startswith("Nothing owed")
    c.close()

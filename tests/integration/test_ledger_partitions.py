"""The ledger (`notifications`) partitioned by month on real PostgreSQL (migration 0028, docs/scaling.md).

Invariants: the migration converts a ledger holding several months in one transaction and keeps every row (each in
its month's partition), every dedupe key once in `ledger_keys`, and its downgrade puts them back; a dedupe key is
once across every month — the ledger's way in skips a key another month's message holds and returns that message,
any other writer is refused as the UNIQUE constraint refused it; the owed partial index is on every partition; an
archived month's messages leave with their partition, their keys stay (never ledgered again), their id answers
"archived on …, in file …" in the API (410, its own tenant only; another's is a 404), and `outbox check` is clean.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from domain import invariants
from domain.db import UnitOfWork, get_engine
from domain.ledger.write import NewMessage, dedupe_key, ledger_message
from domain.retention.archive import archive_before
from domain.retention.months import PARTITIONED, add_months, month_of, partition_name
from domain.retention.partitions import ensure_partitions

MONTHS = [datetime(2026, m, 10, 12, 0, tzinfo=UTC) for m in (6, 7, 8, 9)]


@pytest.fixture(autouse=True)
def _old_months_dropped_after() -> Iterator[None]:
    """Partitions outlive the per-test reset: the months these tests make (June–September 2026, of every
    partitioned table) are dropped after each, so a later test of this worker — an archive that expects one month
    before its cutoff, or none — does not find them (an archive before 2026-09 once exported June and July too)."""
    yield
    with get_engine().begin() as c:
        for parent in PARTITIONED:
            for at in MONTHS:
                c.execute(sa.text(f"DROP TABLE IF EXISTS {partition_name(parent, month_of(at))}"))


def one(sql: str, **params: Any) -> Any:
    with get_engine().connect() as c:
        return c.execute(sa.text(sql), params).scalar()


def old_message(at: datetime, subject: str, status: str = "DELIVERED") -> int:
    """A settled message of another month with the key the ledger would give it (free: no money to reconcile)."""
    with get_engine().begin() as c:
        return int(c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at, settled_at) "
            "VALUES (42, 'cust-001', 'email', 'normal', 'digest', '{}', :k, :s, 0, 1, 8, :at, :at, :at, :at) "
            "RETURNING id"), {"k": dedupe_key(42, "email", "cust-001", "digest", subject), "s": status, "at": at})
            .scalar_one())


def digest_message(subject: str) -> NewMessage:
    return NewMessage(tenant_id=42, recipient="cust-001", channel="email", lane="normal", template="digest",
                      subject=subject)


def assert_clean() -> None:
    counts = invariants.invariant_counts()
    assert not any(counts.values()), counts


def test_a_dedupe_key_is_once_across_months(db: str) -> None:
    """Invariant: the ledger's way in finds a key another month's message holds, writes nothing and answers that
    message; a hand-written duplicate into this month is refused; the key table names the message and its month."""
    # An earlier test may have made August's partition (partitions outlive the per-test reset): empty, so dropped,
    # and this month's message waits in DEFAULT as the test needs.
    with get_engine().begin() as c:
        c.execute(sa.text("DROP TABLE IF EXISTS notifications_2026_08"))
    aug = old_message(MONTHS[2], "2026-08-digest")
    assert one("SELECT tableoid::regclass::text FROM notifications WHERE id = :i", i=aug) == "notifications_default"
    assert "notifications_2026_08" in ensure_partitions(ahead=1)  # moved out of DEFAULT into its month
    with UnitOfWork() as uow:
        again = ledger_message(uow, digest_message("2026-08-digest"))
        fresh = ledger_message(uow, digest_message("2026-12-digest"))
        uow.commit()
    assert (again.notification_id, again.created) == (aug, False)
    assert fresh.created and fresh.notification_id != aug
    assert one("SELECT count(*) FROM notifications WHERE dedupe_key LIKE '%2026-08-digest'") == 1
    assert one("SELECT tableoid::regclass::text FROM notifications WHERE id = :i", i=aug) == "notifications_2026_08"
    with pytest.raises(sa.exc.IntegrityError, match="ledger_keys_pkey"):
        old_message(datetime.now(UTC), "2026-08-digest")
    assert one("SELECT count(*) FROM ledger_keys WHERE notification_id = :i AND created_at = :at", i=aug,
               at=MONTHS[2]) == 1
    # The owed partial index is on every partition of the ledger.
    assert one("SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent "
               "WHERE p.relname = 'notifications_owed'") == one(
        "SELECT count(*) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'notifications'")
    assert_clean()


async def test_an_archived_month_leaves_with_its_messages_and_its_ids_say_where(
        db: str, tmp_path: Path, client: Any, key42: dict[str, str], key7: dict[str, str]) -> None:
    """Invariant: archive exports and drops the month's messages; their keys stay, so the same message is never
    ledgered again; the API answers an archived id with where it went (410), to its tenant only; check is clean."""
    ids = [old_message(MONTHS[2] + timedelta(hours=i), f"aug-{i}") for i in range(3)]
    kept = old_message(MONTHS[3], "sep-0")
    (aug,) = archive_before(date(2026, 9, 1), tmp_path, actor_ref="test:oncall")
    assert aug.month == "2026-08" and aug.messages == 3 and "notifications_2026_08" in aug.dropped
    assert one("SELECT count(*) FROM notifications WHERE id = ANY(:i)", i=ids) == 0
    assert one("SELECT count(*) FROM notifications WHERE id = :i", i=kept) == 1
    assert one("SELECT count(*) FROM ledger_archives WHERE month = '2026-08-01'") == 1
    with UnitOfWork() as uow:
        again = ledger_message(uow, digest_message("aug-0"))
        uow.commit()
    assert (again.notification_id, again.created, again.status) == (ids[0], False, "ARCHIVED")
    assert one("SELECT count(*) FROM notifications WHERE dedupe_key LIKE :k", k="%aug-0") == 0
    assert_clean()

    r = await client.get(f"/api/v1/messages/{ids[0]}", headers=key42)
    assert r.status_code == 410, r.text
    body = r.json()
    assert body["error"] == "archived" and body["month"] == "2026-08" and body["file"] == aug.path.name
    assert "archived on" in body["answer"] and aug.path.name in body["answer"]
    assert (await client.get(f"/api/v1/messages/{ids[0]}", headers=key7)).status_code == 404
    assert (await client.get(f"/api/v1/messages/{kept}", headers=key42)).status_code == 200
    assert (await client.get("/api/v1/messages/999999", headers=key42)).status_code == 404


def test_the_migration_converts_a_ledger_of_several_months_and_back(migrated_db: str) -> None:
    """Invariant: on a copy holding four months of messages (with attempts, a balance entry and a code), 0028 keeps
    every row unchanged, each in its month's partition, one key per message; a duplicate key into another month is
    refused afterwards; the id sequence carries on; the downgrade puts every row back with `dedupe_key` UNIQUE."""
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import make_url

    from jobs.ops.dbadmin import ensure_database
    from jobs.ops.procs import ROOT

    url = f"{migrated_db}_ledgermig"
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "alembic"))
    cfg.attributes["url"] = url
    ours = next(s for s in ScriptDirectory.from_config(cfg).walk_revisions()
                if "partitioned_ledger" in (s.path or ""))
    ensure_database(url, reset=True)
    eng = sa.create_engine(url)
    digest = "SELECT count(*) || ':' || sum(hashtext(n::text)) FROM notifications n"
    try:
        command.upgrade(cfg, str(ours.down_revision))
        with eng.begin() as c:
            c.execute(sa.text("INSERT INTO tenants (id, name) VALUES (42, 't')"))
            c.execute(sa.text("INSERT INTO balances (tenant_id, balance_cents) VALUES (42, 95)"))
            for i, at in enumerate(MONTHS * 5):
                n = c.execute(sa.text(
                    "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                    "status, cost_cents, attempts, max_attempts, created_at) VALUES (42, 'r', 'sms', 'normal', 't', "
                    "'{}', :k, 'SENT', 0, 1, 8, :at) RETURNING id"), {"k": f"k{i}", "at": at}).scalar_one()
                c.execute(sa.text("INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, "
                                  "outcome, notification_created_at) VALUES (:n, 1, 'w', :at, 'sent', :at)"),
                          {"n": n, "at": at})
            c.execute(sa.text("INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason) "
                              "VALUES (42, 1, 'opening', 95, 'o')"))
            c.execute(sa.text("INSERT INTO otp_codes (notification_id, tenant_id, nonce, code_hash, expires_at) "
                              "VALUES (2, 42, 'n', 'h', now())"))
            before = c.execute(sa.text(digest)).scalar_one()

        command.upgrade(cfg, ours.revision)
        with eng.begin() as c:
            def q(sql: str, **p: Any) -> Any:
                return c.execute(sa.text(sql), p).scalar()

            assert q(digest) == before and q("SELECT count(*) FROM notifications") == 20
            assert q("SELECT relkind FROM pg_class WHERE relname = 'notifications'") == "p"
            for at in MONTHS:
                assert q(f"SELECT count(*) FROM notifications_{at:%Y_%m}") == 5
            assert q("SELECT count(*) FROM notifications_default") == 0
            assert q("SELECT count(*) FROM ledger_keys k JOIN notifications n ON n.id = k.notification_id "
                     "AND n.created_at = k.created_at AND n.dedupe_key = k.dedupe_key AND n.tenant_id = k.tenant_id") \
                == 20
            ahead = add_months(month_of(datetime.now(UTC)), 3)
            assert q("SELECT to_regclass(:t) IS NOT NULL", t=f"notifications_{ahead:%Y_%m}")
            with pytest.raises(sa.exc.IntegrityError, match="ledger_keys_pkey"), c.begin_nested():
                c.execute(sa.text("INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, "
                                  "dedupe_key, status, cost_cents, attempts, max_attempts) VALUES (42, 'r', 'sms', "
                                  "'normal', 't', '{}', 'k0', 'QUEUED', 0, 0, 8)"))
            new = c.execute(sa.text(
                "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                "status, cost_cents, attempts, max_attempts) VALUES (42, 'r', 'sms', 'normal', 't', '{}', 'k-new', "
                "'QUEUED', 0, 0, 8) RETURNING id")).scalar_one()
            assert new > 20

        command.downgrade(cfg, str(ours.down_revision))
        with eng.begin() as c:
            assert c.execute(sa.text("SELECT count(*) FROM notifications")).scalar_one() == 21
            assert c.execute(sa.text("SELECT relkind FROM pg_class WHERE relname = 'notifications'")).scalar() == "r"
            with pytest.raises(sa.exc.IntegrityError, match="notifications_dedupe_key_key"), c.begin_nested():
                c.execute(sa.text("INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, "
                                  "dedupe_key, status, cost_cents, attempts, max_attempts) VALUES (42, 'r', 'sms', "
                                  "'normal', 't', '{}', 'k0', 'QUEUED', 0, 0, 8)"))
        command.upgrade(cfg, "head")
    finally:
        eng.dispose()
        srv = sa.create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        with srv.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
        srv.dispose()


def test_an_archive_in_progress_holds_back_no_write_to_this_months_messages(db: str) -> None:
    """Invariant: while `outbox archive` holds an old month of the ledger (read, written out, about to be dropped),
    the delivery path's writes to this month's messages go on. They name a row by id, never its month, so each one
    locks every partition of the ledger: a SHARE lock on the old month's partition held all of them back for the
    whole export. The archive locks the old month's rows instead — and the test shows the partition lock would
    not do (the same UPDATE waits and times out behind it)."""
    from domain.retention import sql as retention_sql

    old = old_message(MONTHS[1], "2026-07-held")
    ensure_partitions(ahead=1)
    name = str(one("SELECT tableoid::regclass::text FROM notifications WHERE id = :i", i=old))
    assert name == "notifications_2026_07", name
    with UnitOfWork() as uow:
        fresh = ledger_message(uow, digest_message("held-back?")).notification_id
        uow.commit()

    def touch_this_month() -> None:
        with get_engine().begin() as c:
            c.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
            c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() WHERE id = :i"), {"i": fresh})

    archive = get_engine().connect()
    try:
        with archive.begin():
            assert archive.execute(retention_sql.lock_ledger_month(name)).scalar_one() == 1
            touch_this_month()  # goes through at once: no wait for the archive's commit
        with archive.begin():
            archive.execute(retention_sql.lock_month([name]))
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"):
                touch_this_month()
    finally:
        archive.close()
    assert_clean()


def _owed_webhook(at: datetime) -> int:
    """An owed webhook to the system's receiver (free, uncapped: nothing to take) ledgered in `at`'s month, due now."""
    with get_engine().begin() as c:
        return int(c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, created_at, next_attempt_at) VALUES (42, 'receiver', 'webhook', "
            "'high', 'order.approved', '{}', :k, 'QUEUED', 0, 0, 8, :at, now() - interval '1 second') RETURNING id"),
            {"k": f"month-carry-{at:%Y-%m}-{uuid.uuid4().hex[:8]}", "at": at}).scalar_one())


def _partitions_planned(statement: str, params: dict[str, Any]) -> set[str]:
    """The ledger partitions the plan of `statement` names, planned with its values (as a statement PgBouncer's
    unprepared pools send is: no generic plan), inside a transaction rolled back."""
    with get_engine().connect() as c:
        plan = "\n".join(r[0] for r in c.execute(sa.text(f"EXPLAIN {statement}"), params))
        c.rollback()
    return set(re.findall(r"\bnotifications_(?:\d{4}_\d{2}|default)\b", plan))


async def test_the_hot_path_names_each_row_by_its_month(db: str) -> None:
    """Invariant (issue 29, item 2): a batched claim reads each row's month (`created_at`, the partition key) and
    every later statement on the row names it — its record is planned on that month's partition alone, where by id
    alone it was planned on every partition (a custom plan, as through PgBouncer, plans each one it cannot prune:
    2.5 ms against 0.36 ms at 48 months, evidence/bench.json `record_ms_partitions_*`). A row owed in an older
    month (a replayed message) is claimed and recorded in its own partition like this month's."""
    from domain.delivery import sql, sql_record, store, store_batch
    from domain.delivery.retry import Succeeded
    from domain.settings import get_settings

    for at in MONTHS:
        old_message(at, f"carry-{at:%Y-%m}")
    ensure_partitions(ahead=1)
    july, now_ = MONTHS[1], datetime.now(UTC)
    old, new = _owed_webhook(july), _owed_webhook(now_)
    pool = await store.open_pool(get_settings().database_url, "outbox-test-month-carry", max_size=1)
    try:
        batch = await store_batch.claim_batch(pool, "high", 10, 30.0, datetime.now(UTC))
        by_id = {r.claim.id: r.claim for r in batch.ready}
        assert set(by_id) == {old, new} and not batch.settled, batch
        assert by_id[old].created_at == july and month_of(by_id[new].created_at) == month_of(now_)
        got = await store_batch.record_batch(pool, [store_batch.Attempted(
            c, Succeeded(False), datetime.now(UTC), 200, 1.0, f"ref-{c.id}") for c in by_id.values()], "month-carry")
    finally:
        await pool.close()
    assert got == {old: "sent", new: "sent"}
    with get_engine().connect() as c:
        done = dict(c.execute(sa.text(
            "SELECT n.id, n.status || ' ' || n.tableoid::regclass::text || ' ' || (a.notification_created_at = "
            "n.created_at) FROM notifications n JOIN notification_attempts a ON a.notification_id = n.id "
            "WHERE n.id = ANY(:i)"), {"i": [old, new]}).all())
    assert done == {old: "DELIVERED notifications_2026_07 true",
                    new: f"DELIVERED notifications_{now_:%Y_%m} true"}, done

    c = by_id[old]
    one_row = {"id": c.id, "created_at": c.created_at, "final": "DELIVERED", "provider_reference": None,
               "key": c.dedupe_key, "attempt_no": 1, "worker": "plan", "started": now_, "outcome": "sent", "code": 200,
               "latency": 1.0, "excerpt": None}
    assert _partitions_planned(sql_record.RECORD_SENT.text, one_row) == {"notifications_2026_07"}
    by_id_alone = sql_record.RECORD_SENT.text.replace(" AND created_at = CAST(:created_at AS timestamptz)", "")
    assert by_id_alone != sql_record.RECORD_SENT.text
    assert len(_partitions_planned(by_id_alone, one_row)) >= len(MONTHS) + 2  # every month, ahead and DEFAULT
    batch_row = {"worker": "plan", "ids": [c.id], "finals": ["DELIVERED"], "provider_references": [None],
                 "keys": [c.dedupe_key], "attempt_nos": [1], "starteds": [now_], "outcomes": ["sent"], "codes": [200],
                 "latencies": [1.0], "excerpts": [None], "created_ats": [c.created_at]}
    assert _partitions_planned(sql_record.RECORD_SENT_BATCH.text, batch_row) == {"notifications_2026_07"}
    take = {"tenant_id": 42, "recipient": "receiver", "day": None, "cap": 0, "cents": 0, "id": c.id,
            "created_at": c.created_at, "reason": "x", "template_version": None}
    assert _partitions_planned(sql.TAKE.text, take) == {"notifications_2026_07"}
    assert_clean()


async def test_a_per_row_wake_up_carries_its_month_to_the_claim(db: str) -> None:
    """Invariant (issue 29, item 2, the per-row path): the relay's scan and the ledger's way in hand each row over
    with its month (`OwedRow.created_at`), the per-row job carries it, and the claim by id and month is planned on
    that month's partition alone; a wake-up naming another month claims nothing (the row stays owed, untouched)."""
    from domain.delivery import long_way, sql, store
    from domain.delivery.plan import claim_params
    from domain.settings import get_settings
    from jobs.relay import claim_owed

    for at in MONTHS:
        old_message(at, f"per-row-{at:%Y-%m}")
    ensure_partitions(ahead=1)
    july = MONTHS[1]
    old = _owed_webhook(july)
    with UnitOfWork() as uow:
        fresh = ledger_message(uow, digest_message("per-row-fresh"))
        uow.commit()
    assert fresh.created and fresh.owed().created_at is not None
    assert fresh.owed().created_at == one("SELECT created_at FROM notifications WHERE id = :i",
                                          i=fresh.notification_id)
    (scanned,) = [s.row for s in claim_owed(0, 10, 1.0, "high")]
    assert (scanned.notification_id, scanned.created_at) == (old, july)

    params = claim_params(old, 30.0, datetime.now(UTC), july)
    assert _partitions_planned(sql.CLAIM_IN_MONTH.text, params) == {"notifications_2026_07"}
    pool = await store.open_pool(get_settings().database_url, "outbox-test-per-row-month", max_size=1)
    try:
        assert await store.claim(pool, old, 30.0, datetime.now(UTC), "test", MONTHS[2]) is None  # August: not it
        assert one("SELECT claim_token FROM notifications WHERE id = :i", i=old) == 0
        got = await store.claim(pool, old, 30.0, datetime.now(UTC), "test", july)
    finally:
        await pool.close()
    assert got is not None and got.claim.id == old and got.claim.created_at == july
    long_way.give_back(got.claim)
    assert one("SELECT status FROM notifications WHERE id = :i", i=old) == "QUEUED"
    assert_clean()

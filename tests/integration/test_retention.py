"""Retention on real PostgreSQL: the attempts and receipts partitioned by month, a settled month archived to a
redacted file and dropped, and the pruning of what is not partitioned.

Invariants: archive never drops a month that still owes a message or a receipt, and refusing changes nothing; the
archive file holds no contact point, code or payload; after an archive the month's partitions are gone and every
invariant of `outbox check` holds; a row of a month not created yet waits in the DEFAULT partition and is moved to
its month when it is created; a receipt id is kept once across months; prune deletes exactly what the retention
lets go; the partial indexes are still what the hot path's and the fence's queries use on the partitioned tables.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.receipts import apply_receipt
from domain.retention.archive import ArchiveRefused, archive_before
from domain.retention.months import add_months, month_of
from domain.retention.partitions import ensure_partitions, partitions
from domain.retention.prune import prune
from domain.support.message import archived, message_page
from tests.support.db import assert_invariants, one
from tests.support.retention import AUG, CODE, attempt, contact_points, message, run, table_digest


def receipt(notification_id: int | None, receipt_id: str, at: datetime, applied: bool = True) -> None:
    run("WITH k AS (INSERT INTO delivery_receipt_keys (receipt_id, received_at) VALUES (:r, :at) RETURNING *) "
        "INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome, notification_id, "
        "received_at, applied_at) SELECT receipt_id, 'sms', 'sms-ref', 'delivered', :n, received_at, "
        "CASE WHEN :applied THEN received_at END FROM k", r=receipt_id, at=at, n=notification_id, applied=applied)


def partition_names(parent: str) -> set[str]:
    return {p.name for p in partitions() if p.parent == parent}






def test_a_row_of_a_month_not_created_yet_waits_in_default_and_joins_its_month(db: str) -> None:
    """Invariant: the hot path never fails for want of a partition (the DEFAULT takes the row), and `ensure` creates
    this month and the months ahead and moves such rows into their own month; attempts are filed under their
    MESSAGE's month."""
    n = message(AUG, "DELIVERED", "early-1")
    attempt(n, 1)
    assert one("SELECT count(*) FROM notification_attempts_default") == 1
    made = ensure_partitions(ahead=2)
    assert "notification_attempts_2026_08" in made
    assert one("SELECT count(*) FROM notification_attempts_default") == 0
    assert one("SELECT count(*) FROM notification_attempts_2026_08 WHERE notification_id = :n", n=n) == 1
    this = month_of(datetime.now(UTC))
    for i in range(3):
        assert f"notification_attempts_{add_months(this, i):%Y_%m}" in partition_names("notification_attempts")
        assert f"delivery_receipts_{add_months(this, i):%Y_%m}" in partition_names("delivery_receipts")
    assert ensure_partitions(ahead=2) == []  # idempotent
    assert_invariants()


def test_archive_refuses_a_month_that_still_owes_and_changes_nothing(db: str, tmp_path: Path) -> None:
    """Invariant: never an owed row archived. A month with a message still QUEUED, or a receipt of it not yet
    applied to a message still owed, is refused: no file, no partition dropped or created, not a row changed."""
    done = message(AUG, "DELIVERED", "aug-done")
    attempt(done, 1)
    owed = message(AUG + timedelta(days=3), "QUEUED", "aug-owed")
    attempt(owed, 1, "retry", 503)
    before, parts = table_digest(), {p.name for p in partitions()}
    with pytest.raises(ArchiveRefused, match="2026-08: 1 owed message"):
        archive_before(date(2026, 10, 1), tmp_path, actor_ref="test:oncall")
    assert table_digest() == before and {p.name for p in partitions()} == parts
    assert list(tmp_path.iterdir()) == []

    # Settled, but a receipt of August still waits to be applied to a message still owed (July's, its send not
    # recorded yet): still refused. (A receipt left on a row that can no longer change holds nothing: invariant 14
    # shows it — tests/integration/test_delivery_receipts.py.)
    run("UPDATE notifications SET status = 'FAILED', settled_at = now(), last_error_class = 'exhausted' "
        "WHERE id = :n", n=owed)
    july = message(AUG - timedelta(days=20), "QUEUED", "jul-owed")
    receipt(july, "rcpt-aug-pending", AUG + timedelta(days=1), applied=False)
    before = table_digest()
    with pytest.raises(ArchiveRefused, match=r"2026-08: 0 owed message\(s\), 1 receipt"):
        archive_before(date(2026, 10, 1), tmp_path, actor_ref="test:oncall")
    assert table_digest() == before and list(tmp_path.iterdir()) == []


def test_archive_writes_a_redacted_month_then_drops_it_and_every_invariant_holds(db: str, tmp_path: Path) -> None:
    """Invariants: the archive file holds the month's ids, states and times, and no contact point, code or payload
    (grepped for the seeded phone and e-mail and the code); the month's partitions are gone afterwards, its
    receipt keys forgotten, this month untouched, the action audited, and every invariant of `outbox check` holds."""
    email, phone = contact_points()
    ids = [message(AUG + timedelta(hours=i), "DELIVERED", f"aug-{i}") for i in range(3)]
    for n in ids:
        attempt(n, 1, "retry", 503)
        attempt(n, 2)
        receipt(n, f"rcpt-{n}", AUG + timedelta(days=1))
    now_id = message(datetime.now(UTC), "DELIVERED", "this-month")
    attempt(now_id, 1)

    got = archive_before(date(2026, 10, 1), tmp_path, actor_ref="test:oncall")

    aug = next(m for m in got if m.month == "2026-08")
    assert (aug.messages, aug.attempts, aug.receipts) == (3, 6, 3)
    text = aug.path.read_text()
    assert aug.path.parent == tmp_path and aug.path.name == "ledger-2026-08.jsonl"
    for secret in (email, phone, phone.lstrip("+"), CODE, "Your code"):
        assert secret not in text, f"{secret!r} leaked into the archive"
    lines = [json.loads(x) for x in text.splitlines()]
    assert lines[0]["kind"] == "archive" and lines[0]["month"] == "2026-08"
    assert sorted(x["id"] for x in lines if x["kind"] == "message") == sorted(ids)
    assert all("payload" not in x and "response_excerpt" not in x and "dedupe_key" not in x for x in lines)

    assert not {"notification_attempts_2026_08"} & partition_names("notification_attempts")
    assert not {"delivery_receipts_2026_08"} & partition_names("delivery_receipts")
    assert not {"notifications_2026_08"} & partition_names("notifications")
    assert one("SELECT count(*) FROM notifications WHERE id = ANY(:i)", i=ids) == 0
    # The month's keys are kept: a message once ledgered is never ledgered again.
    assert one("SELECT count(*) FROM ledger_keys WHERE notification_id = ANY(:i)", i=ids) == 3
    assert one("SELECT count(*) FROM notification_attempts WHERE notification_id = ANY(:i)", i=ids) == 0
    assert one("SELECT count(*) FROM delivery_receipt_keys WHERE receipt_id LIKE 'rcpt-%'") == 0
    assert one("SELECT count(*) FROM notification_attempts WHERE notification_id = :n", n=now_id) == 1
    # Every page still right: this month's message shows its attempt (read from its own month's partition), an
    # archived month's message says where it went (and only to its own tenant).
    assert [a["outcome"] for a in message_page(42, now_id, datetime.now(UTC))["attempt_log"]] == ["sent"]
    assert message_page(42, ids[0], datetime.now(UTC)) is None
    gone = archived(42, ids[0])
    assert gone is not None and gone["month"] == "2026-08" and gone["file"] == aug.path.name
    assert gone["answer"].startswith(f"Message #{ids[0]} was archived on ") and aug.path.name in gone["answer"] \
        and str(aug.path.parent) not in gone["answer"]
    assert archived(7, ids[0]) is None and archived(42, now_id) is None
    assert one("SELECT count(*) FROM operator_actions WHERE action = 'archive' AND target = 'ledger 2026-08' "
               "AND actor_ref = 'test:oncall'") == 1
    assert_invariants()
    assert archive_before(date(2026, 10, 1), tmp_path, actor_ref="test:oncall") == []  # nothing left to do


def test_a_month_archived_again_never_replaces_its_first_export(db: str, tmp_path: Path) -> None:
    """Invariant: an export once written is kept. A row written later under an archived month (only a hand-written
    one can be: the ledger writes `now()`) waits in DEFAULT, its month is made again, and archiving it again writes
    `ledger-YYYY-MM.2.jsonl` beside the first file, which is left byte for byte as it was."""
    n = message(AUG, "DELIVERED", "aug-again")
    attempt(n, 1)
    (first,) = archive_before(date(2026, 9, 1), tmp_path, actor_ref="test:oncall")
    kept = first.path.read_bytes()
    m = message(AUG + timedelta(days=1), "DELIVERED", "aug-late")  # DEFAULT until its month is made again
    attempt(m, 1)
    (second,) = archive_before(date(2026, 9, 1), tmp_path, actor_ref="test:oncall")
    assert (first.path.name, second.path.name) == ("ledger-2026-08.jsonl", "ledger-2026-08.2.jsonl")
    assert first.path.read_bytes() == kept and (second.messages, second.attempts) == (1, 1)
    assert_invariants()


def test_a_receipt_id_is_kept_once_across_months(db: str) -> None:
    """Invariant: a provider retrying a receipt changes nothing, even when the first copy sits in another month's
    partition (the unpartitioned key holds the uniqueness the partitioned table cannot)."""
    n = message(AUG, "SENT", "aug-retry-receipt")
    ensure_partitions(ahead=1)
    receipt(n, "rcpt-once", AUG + timedelta(days=1))
    got = apply_receipt("sms", "rcpt-once", "sms-aug-retry-receipt", "delivered",
                        client_reference="aug-retry-receipt")
    assert got.status == "duplicate"
    assert one("SELECT count(*) FROM delivery_receipts WHERE receipt_id = 'rcpt-once'") == 1
    run("UPDATE notifications SET status = 'DELIVERED', settled_at = now() WHERE id = :n", n=n)
    assert_invariants()


def test_prune_removes_only_what_retention_lets_go(db: str) -> None:
    """Invariant: prune deletes exactly the rows older than the retention in the tables that are not partitioned
    (never a live session, an idempotency key still in its window, a counter locking someone out, or anything of the
    ledger); a dry run counts the same rows and changes nothing."""
    old, recent = datetime.now(UTC) - timedelta(days=40), datetime.now(UTC) - timedelta(days=5)
    future = datetime.now(UTC) + timedelta(days=1)
    run("INSERT INTO refresh_metrics (kind, tenant_id, latency_ms, created_at) "
        "VALUES ('push', 42, 1, :old), ('push', 42, 1, :old), ('push', 42, 1, :recent)", old=old, recent=recent)
    op = one("SELECT id FROM operators WHERE login = 'alice'")
    run("INSERT INTO operator_sessions (token_hash, operator_id, created_at, expires_at, ended_at) VALUES "
        "('ended-old', :o, :old, :future, :old), ('expired-old', :o, :old, :old, NULL), "
        "('live', :o, :old, :future, NULL), ('ended-recent', :o, :recent, :future, :recent)",
        o=op, old=old, recent=recent, future=future)
    run("INSERT INTO idempotency_keys (tenant_id, key, request_digest, method, path, created_at, locked_until, "
        "expires_at) VALUES (42, 'old', 'd', 'POST', '/x', :old, :old, :old), "
        "(42, 'fresh', 'd', 'POST', '/x', :recent, :recent, :future)", old=old, recent=recent, future=future)
    run("INSERT INTO login_throttle (key, failures, locked_until, updated_at) VALUES "
        "('login:old', 3, NULL, :old), ('login:locked', 9, :future, :old), ('login:recent', 1, NULL, :recent)",
        old=old, recent=recent, future=future)
    run("INSERT INTO ops_series_points (scope, step_minutes, t, depth_max, oldest_max_seconds, sent, "
        "latency_mean_seconds, latency_max_seconds) VALUES (0, 1, :old, 1, 0, 0, 0, 0), "
        "(42, 120, :recent, 2, 0, 0, 0, 0)", old=old, recent=recent)
    n = message(datetime.now(UTC) - timedelta(days=60), "DELIVERED", "old-but-ledger")
    before = table_digest()

    expected = {"refresh_metrics": 2, "ops_series_points": 1, "operator_sessions": 2, "idempotency_keys": 1,
                "login_throttle": 1}
    assert prune(30, dry_run=True) == expected
    assert one("SELECT count(*) FROM refresh_metrics") == 3
    assert prune(30) == expected
    assert one("SELECT count(*) FROM refresh_metrics") == 1
    assert one("SELECT count(*) FROM ops_series_points") == 1
    assert one("SELECT string_agg(token_hash, ',' ORDER BY token_hash) FROM operator_sessions WHERE token_hash IN "
               "('ended-old', 'expired-old', 'live', 'ended-recent')") == "ended-recent,live"
    assert one("SELECT string_agg(key, ',' ORDER BY key) FROM idempotency_keys") == "fresh"
    assert one("SELECT string_agg(key, ',' ORDER BY key) FROM login_throttle") == "login:locked,login:recent"
    assert table_digest() == before and one("SELECT count(*) FROM notifications WHERE id = :n", n=n) == 1
    assert prune(30) == dict.fromkeys(expected, 0)
    with pytest.raises(ValueError, match="positive"):
        prune(0)
    assert_invariants()


def _index_names(plan: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(plan, dict):
        if "Index Name" in plan:
            found.add(plan["Index Name"])
        for v in plan.values():
            found |= _index_names(v)
    elif isinstance(plan, list):
        for v in plan:
            found |= _index_names(v)
    return found


def _children_of(index: str) -> set[str]:
    with get_engine().connect() as c:
        return {r for (r,) in c.execute(sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = :i"), {"i": index})}


def test_the_partial_indexes_still_serve_the_partitioned_tables(db: str) -> None:
    """Invariant: partitioning keeps the partial indexes in use. With 20,000 attempts and receipts in this month's
    partitions, the hot path's pending-receipt check reads `delivery_receipts_pending` and the fence counts read
    `notification_attempts_fenced` (each partition's copy of it), not the whole table; the relay's scan still reads
    `notifications_owed`."""
    run("INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
        "cost_cents, attempts, max_attempts, sent_at, settled_at) SELECT 42, 'cust-001', 'webhook', 'high', 't', "
        "'{}', 'plan-' || g, 'DELIVERED', 0, 1, 8, now(), now() FROM generate_series(1, 20000) g")
    run("INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, outcome, status_code, "
        "notification_created_at) SELECT id, 1, 'w', now(), CASE WHEN id % 5000 = 0 THEN 'stale' ELSE 'sent' END, "
        "200, created_at FROM notifications")
    run("WITH k AS (INSERT INTO delivery_receipt_keys (receipt_id, received_at) SELECT 'plan-' || id, now() "
        "FROM notifications RETURNING receipt_id, received_at) INSERT INTO delivery_receipts (receipt_id, provider, "
        "provider_reference, outcome, notification_id, received_at, applied_at) SELECT receipt_id, 'email', "
        "receipt_id, 'delivered', substr(receipt_id, 6)::bigint, received_at, received_at FROM k")
    # VACUUM too: the rows earlier tests left and the per-test reset deleted are still in the indexes until a vacuum,
    # and a partial index full of dead entries can cost the planner more than the table's primary key.
    with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(sa.text("VACUUM ANALYZE notifications, notification_attempts, delivery_receipts"))

    def plan(sql: str, **params: Any) -> set[str]:
        with get_engine().connect() as c:
            got = c.execute(sa.text(f"EXPLAIN (FORMAT JSON) {sql}"), params).scalar()
        return _index_names(got)

    pending = plan("SELECT EXISTS (SELECT 1 FROM delivery_receipts WHERE notification_id = :id "
                   "AND applied_at IS NULL) AS pending", id=17)
    assert pending and pending <= _children_of("delivery_receipts_pending"), pending
    fenced = plan("SELECT outcome, count(*) FROM notification_attempts WHERE outcome IN ('late_accept', 'stale') "
                  "GROUP BY outcome")
    assert fenced and fenced <= _children_of("notification_attempts_fenced"), fenced
    owed = plan("SELECT id FROM notifications WHERE status = 'QUEUED' ORDER BY id LIMIT 500")
    # The ledger is partitioned too: each partition's copy of the owed partial index (a merge of them).
    assert owed and owed <= _children_of("notifications_owed") | _children_of("notifications_owed_by_lane"), owed


def test_the_migration_moves_existing_rows_into_month_partitions_and_back(migrated_db: str) -> None:
    """Invariant: the migration converts a database that already holds attempts and receipts (the demo's) without
    losing or changing one: each attempt lands in its MESSAGE's month, each receipt in its own month with its key
    kept once, the id sequences carry on; its downgrade puts every row back in one table."""
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from jobs.ops.dbadmin import ensure_database
    from jobs.ops.procs import ROOT

    url = f"{migrated_db}_partmig"
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "alembic"))
    cfg.attributes["url"] = url
    ours = next(s for s in ScriptDirectory.from_config(cfg).walk_revisions()
                if "partitioned_attempts" in (s.path or ""))
    ensure_database(url, reset=True)
    eng = sa.create_engine(url)
    try:
        command.upgrade(cfg, str(ours.down_revision))
        with eng.begin() as c:
            c.execute(sa.text("INSERT INTO tenants (id, name) VALUES (42, 't')"))
            for i, at in enumerate((AUG, datetime.now(UTC))):
                n = c.execute(sa.text(
                    "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                    "status, cost_cents, attempts, max_attempts, created_at) VALUES (42, 'r', 'sms', 'normal', 't', "
                    "'{}', :k, 'SENT', 0, 2, 8, :at) RETURNING id"), {"k": f"k{i}", "at": at}).scalar_one()
                for no in (1, 2):
                    c.execute(sa.text("INSERT INTO notification_attempts (notification_id, attempt_no, worker, "
                                      "started_at, outcome) VALUES (:n, :no, 'w', :at, 'sent')"),
                              {"n": n, "no": no, "at": at + timedelta(days=20)})
                c.execute(sa.text("INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome, "
                                  "received_at, notification_id, applied_at) VALUES (:r, 'sms', 'p', 'delivered', "
                                  ":at, :n, :at)"), {"r": f"r{i}", "at": at + timedelta(days=1), "n": n})
            before = c.execute(sa.text("SELECT count(*) FROM notification_attempts")).scalar_one()

        command.upgrade(cfg, ours.revision)
        with eng.begin() as c:
            q = lambda sql: c.execute(sa.text(sql)).scalar()  # noqa: E731
            assert q("SELECT count(*) FROM notification_attempts") == before == 4
            # August's attempts are filed under August although they were made in September.
            assert q("SELECT count(*) FROM notification_attempts_2026_08") == 2
            assert q("SELECT count(*) FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id "
                     "WHERE a.notification_created_at <> n.created_at") == 0
            assert q("SELECT count(*) FROM delivery_receipts_2026_08") == 1
            assert q("SELECT count(*) FROM delivery_receipt_keys") == 2
            assert q("SELECT count(*) FROM notification_attempts_default") == 0
            new = c.execute(sa.text(
                "INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, outcome, "
                "notification_created_at) SELECT id, 3, 'w', now(), 'sent', created_at FROM notifications "
                "WHERE dedupe_key = 'k1' RETURNING id")).scalar_one()
            assert new > q("SELECT max(id) FROM notification_attempts WHERE attempt_no < 3")

        command.downgrade(cfg, str(ours.down_revision))
        with eng.begin() as c:
            assert c.execute(sa.text("SELECT count(*) FROM notification_attempts")).scalar_one() == 5
            assert c.execute(sa.text("SELECT count(*) FROM delivery_receipts")).scalar_one() == 2
            assert c.execute(sa.text("SELECT to_regclass('delivery_receipt_keys')")).scalar() is None
            with pytest.raises(sa.exc.IntegrityError, match="delivery_receipts_receipt_id_key"), c.begin_nested():
                c.execute(sa.text("INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome) "
                                  "VALUES ('r0', 'sms', 'p', 'delivered')"))
        command.upgrade(cfg, "head")
    finally:
        eng.dispose()
        from sqlalchemy.engine import make_url
        srv = sa.create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        with srv.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
        srv.dispose()

"""Retention under hostile input and a racing operator, on real PostgreSQL.

Invariants: `archive --before` never takes the current month (or a later one): this month is still being written,
so its attempts, receipts and receipt keys must never be dropped; a replay that races an archive of its message's
month either lands before the archive reads the month (the archive refuses, nothing changes) or after it has
committed, never in between (a month archived as settled while one of its messages is owed again).
"""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.review import replay
from domain.retention.archive import ArchiveRefused, archive_before
from domain.retention.months import add_months, month_of
from domain.retention.partitions import ensure_partitions, partitions
from jobs.ops.procs import wait_until
from tests.support.db import one
from tests.support.retention import AUG, attempt, message, table_digest


def test_archive_refuses_a_cutoff_that_would_take_the_current_month(db: str, tmp_path: Path) -> None:
    """Invariant: bad input changes nothing. `--before` later than this month (a typo, 2099-01) would archive the
    month being written and the months ahead: it is refused with a clear error, no file, no partition dropped."""
    ensure_partitions(ahead=2)
    n = message(datetime.now(UTC), "DELIVERED", "this-month-done")
    attempt(n, 1)
    before, parts = table_digest(), {p.name for p in partitions()}
    this = month_of(datetime.now(UTC))
    for cutoff in (add_months(this, 1), date(2099, 1, 1)):
        with pytest.raises(ValueError, match="current month"):
            archive_before(cutoff, tmp_path, actor_ref="test:oncall")
    assert table_digest() == before and {p.name for p in partitions()} == parts
    assert list(tmp_path.iterdir()) == []


def _backend_waiting(marker: str) -> bool:
    return bool(one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE :q",
                    q=f"%{marker}%"))



def test_a_replay_racing_an_archive_never_lands_between_its_check_and_its_commit(db: str, tmp_path: Path) -> None:
    """Invariant: never a month archived while one of its messages is owed. A FAILED message of August is replayed
    while the archive of August is under way (held after its owed check by a reader of the attempts table): the
    replay must wait for the archive (or the archive refuse); it must never commit while the archive is pending and
    the archive then drop the month as if it were settled."""
    failed = message(AUG, "FAILED", "aug-failed")
    attempt(failed, 1, "failed", 500)
    ensure_partitions(ahead=1)  # August's partitions exist: the archive's first wait is its DETACH

    blocker = get_engine().connect()
    tx = blocker.begin()
    blocker.execute(sa.text("SELECT count(*) FROM notification_attempts"))  # DETACH waits behind this reader
    outcome: dict[str, Any] = {}

    def run_archive() -> None:
        try:
            outcome["archived"] = archive_before(date(2026, 10, 1), tmp_path, actor_ref="test:oncall")
        except ArchiveRefused as exc:
            outcome["refused"] = exc
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    def run_replay() -> None:
        outcome["replayed"] = replay(None, failed, actor_ref="test:oncall")

    archiver = threading.Thread(target=run_archive)
    replayer = threading.Thread(target=run_replay)
    try:
        archiver.start()
        wait_until(lambda: _backend_waiting("DETACH PARTITION") or not archiver.is_alive(), 20,
                   "the archive to reach DETACH")
        replayer.start()
        # Either the replay commits at once, or it waits for the archive's lock: whichever it does, it is settled
        # before the archive is let go.
        wait_until(lambda: not replayer.is_alive() or _backend_waiting("status = 'QUEUED'")
                   or one("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'") > 0,
                   20, "the replay to commit or to wait")
        replayed_while_pending = not replayer.is_alive() and archiver.is_alive()
    finally:
        tx.rollback()
        blocker.close()
        archiver.join(30)
        replayer.join(30)
    assert "error" not in outcome, outcome
    if "archived" in outcome:
        assert not replayed_while_pending, (
            "the replay committed while the archive was pending, and the archive then dropped August as settled")
    else:
        assert one("SELECT count(*) FROM notification_attempts WHERE notification_id = :n", n=failed) == 1
    if "archived" in outcome and not outcome["replayed"].done:
        # The replay waited for the archive, which took August's messages with it (the ledger is partitioned by
        # month, 0028): nothing is left to replay, and nothing of August is owed.
        assert one("SELECT count(*) FROM notifications WHERE id = :n", n=failed) == 0
        return
    assert outcome["replayed"].done, outcome  # review.replay answers Replayed (done, or refused with why)
    assert one("SELECT status FROM notifications WHERE id = :n", n=failed) == "QUEUED"
    assert one("SELECT now() - created_at > interval '1 day' FROM notifications WHERE id = :n", n=failed)

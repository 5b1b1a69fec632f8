"""/ops' charts from a rollup (domain/delivery/views.py ops_series): a finished point is computed once and kept in
`ops_series_points`, a refresh computes only the points still moving, both through indexes.

Invariant: every point — kept or computed — is exactly what brute force over the whole ledger gives (the depth
counted afresh at every instant of the span where it can peak, the oldest age at each instant it can be at its
oldest: the oracle), for every window and for each tenant and every tenant; a point is the worst of its span, so a
breach inside a long point is never hidden; a point is kept only once its span has ended a minute ago, and a kept
point is read, not computed again.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import views
from domain.delivery.views import OPS_SERIES_WHOLE_LEDGER

ORACLE = OPS_SERIES_WHOLE_LEDGER  # brute force over the whole ledger per point, no index, no sweep


def _ledger(seed: int, rows: int = 400) -> None:
    """Messages of two tenants spread over the last 30 hours: owed (due or not yet; some replayed, so owed again
    with a `sent_at` or `settled_at` of before), sent, failed, suppressed; a third of the times on a point's exact
    boundary (whole minutes from now's minute)."""
    rnd = random.Random(seed)
    base = datetime.now(UTC).replace(second=0, microsecond=0)  # times are minutes before this minute's start

    def ago(lo: float, hi: float) -> float:  # on a point's boundary a third of the time
        m = rnd.uniform(lo, hi)
        return float(round(m)) if rnd.random() < 0.33 else m

    values = []
    for i in range(rows):
        created = ago(0, 30 * 60)
        status = rnd.choice(["QUEUED", "QUEUED", "SENT", "DELIVERED", "FAILED", "SUPPRESSED"])
        due = created - rnd.uniform(-20, created)  # minutes ago it came due (negative: in the future)
        left = ago(0, created)  # minutes ago it left the owed set (or, replayed, left it once before)
        replayed = status == "QUEUED" and rnd.random() < 0.3
        values.append({
            "t": rnd.choice([42, 7]), "k": f"ops-{seed}-{i}", "s": status, "c": created,
            "d": due if status == "QUEUED" else created,
            "sent": left if status in ("SENT", "DELIVERED") or (replayed and rnd.random() < 0.5) else None,
            "settled": left if status in ("FAILED", "SUPPRESSED") or replayed else None,
            "why": "opted_out" if status == "SUPPRESSED" else None, "base": base})
    with get_engine().begin() as c:
        c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at, settled_at, suppressed_reason) "
            "VALUES (:t, 'cust-001', 'sms', 'normal', 'offer', '{}', :k, :s, 0, 1, 8, "
            ":base - make_interval(secs => :c * 60), :base - make_interval(secs => :d * 60), "
            ":base - make_interval(secs => CAST(:sent AS float8) * 60), "
            ":base - make_interval(secs => CAST(:settled AS float8) * 60), :why)"), values)


Point = tuple[str, int, float, int, float, float]


def _rounded(points: list[dict[str, Any]]) -> list[Point]:
    return [(p["minute"], int(p["depth"]), round(float(p["oldest_seconds"]), 3), int(p["sent"]),
             round(float(p["latency_mean_seconds"]), 3), round(float(p["latency_max_seconds"]), 3)) for p in points]


def _db_now() -> datetime:
    with get_engine().connect() as c:
        return c.execute(sa.text("SELECT now()")).scalar_one()  # type: ignore[no-any-return]


def _oracle(tenant: int | None, window: str, now: datetime | None = None) -> list[Point]:
    minutes, step, label = views.SERIES_WINDOWS[window]
    with get_engine().connect() as c:
        return _rounded([dict(r._mapping) for r in c.execute(ORACLE, {
            "window": minutes, "step": step, "label_format": label, "tenant_id": tenant, "now": now})])


def _same_as_the_oracle(tenant: int | None, window: str) -> list[Point]:
    """Ours beside the oracle, both as of one instant (the moving point ends at now: its age grows with it)."""
    now = _db_now()
    ours, oracle = _rounded(views.ops_series(tenant, window, now=now)), _oracle(tenant, window, now)
    assert ours == oracle, (tenant, window, [(a, b) for a, b in zip(ours, oracle, strict=False) if a != b])
    return ours


def _kept(scope: int, step: int) -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT count(*) FROM ops_series_points WHERE scope = :s AND step_minutes = :m "
                                     "AND t + make_interval(mins => :m) > now() - interval '1 minute'"),
                             {"s": scope, "m": step}).scalar_one())


def test_every_point_kept_or_computed_is_what_the_whole_ledger_says(db) -> None:  # type: ignore[no-untyped-def]
    seed = random.SystemRandom().randrange(1, 2**31)
    print(f"ops series seed: {seed}")
    _ledger(seed)
    for window in ("1h", "24h", "7d"):
        for tenant in (None, 42, 7):
            first = _same_as_the_oracle(tenant, window)  # computes and keeps the finished points
            assert any(p[1] for p in first), "the seeded ledger shows on the chart"
            # Read back from what was kept: every ended point the same (the moving one ends at now, so it moves).
            again = {p[0]: p for p in _same_as_the_oracle(tenant, window)[:-1]}
            assert all(again.get(p[0], p) == p for p in first[:-1]), (tenant, window)
    # Only finished points are kept: none whose span ended less than a minute ago.
    assert _kept(0, 1) == 0 and _kept(42, 1) == 0


def test_a_kept_point_is_read_not_computed_again(db) -> None:  # type: ignore[no-untyped-def]
    """The rollup's whole point: once kept, a finished point costs a read. A row written later into a finished
    span (only a restore or a hand edit could) does not move the kept point; the moving ones still see it."""
    _ledger(7, rows=50)
    views.ops_series(42, "1h")
    with get_engine().connect() as c:
        kept = dict(c.execute(sa.text("SELECT t, depth_max FROM ops_series_points WHERE scope = 42 "
                                      "AND step_minutes = 1 ORDER BY t LIMIT 1")).one()._mapping)
    with get_engine().begin() as c:
        c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, created_at, next_attempt_at) VALUES (42, 'cust-001', 'sms', "
            "'normal', 'offer', '{}', 'ops-late', 'QUEUED', 0, 1, 8, :t, :t)"), {"t": kept["t"]})
    label = views._label(kept["t"], "HH24:MI")
    again = {p["minute"]: p for p in views.ops_series(42, "1h")}
    assert again[label]["depth"] == kept["depth_max"]
    now = _db_now()
    assert _rounded(views.ops_series(42, "1h", now=now))[-1] == _oracle(42, "1h", now)[-1]  # the moving one sees it


def test_no_point_is_kept_while_a_transaction_that_began_before_its_end_is_open(db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A worker stopped between its UPDATE (sent_at = now(), its transaction's start) and its COMMIT — a paused
    process, a GC stall, an operator's psql — commits rows into a span that may have ended minutes ago; a point kept
    meanwhile would miss them forever. The settle margin alone cannot know: with the margin taken as a minute
    shorter (standing for a transaction open a minute past it, without waiting a minute), the point the open
    transaction writes into must not be kept, and once it commits every point equals the whole ledger."""
    monkeypatch.setattr(views, "SETTLED_AFTER", views.SETTLED_AFTER - timedelta(minutes=2))
    with get_engine().begin() as c:
        c.execute(sa.text("TRUNCATE ops_series_points"))
        nid = c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
            "status, cost_cents, attempts, max_attempts, created_at, next_attempt_at) VALUES (42, 'cust-001', "
            "'sms', 'normal', 'offer', '{}', :k, 'QUEUED', 0, 0, 8, now() - interval '5 minutes', "
            "now() - interval '5 minutes') RETURNING id"), {"k": f"ops-stalled-{random.random()}"}).scalar_one()
    stalled = get_engine().connect()
    try:
        began = stalled.execute(sa.text("SELECT now()")).scalar_one()  # the stalled worker's transaction
        stalled.execute(sa.text("UPDATE notifications SET status = 'SENT', sent_at = now(), attempts = 1 "
                                "WHERE id = :i"), {"i": nid})
        views.ops_series(42, "1h")  # a refresh while it is stopped
        stalled.commit()
    finally:
        stalled.close()
    with get_engine().connect() as c:
        kept_after = c.execute(sa.text(
            "SELECT count(*) FROM ops_series_points WHERE scope = 42 AND step_minutes = 1 "
            "AND t + interval '1 minute' > :b"), {"b": began}).scalar_one()
    assert kept_after == 0, "a point ending after the open transaction began was kept"
    _same_as_the_oracle(42, "1h")


def test_the_relays_fill_keeps_every_finished_point_so_a_first_load_computes_only_the_moving_ones(db) -> None:  # type: ignore[no-untyped-def]
    """Invariant: after the relay's fill (views.keep_finished_points, each minute) every finished point of every
    window is kept, for every tenant and for all of them; a second fill keeps nothing more; the chart then equals
    the whole-ledger oracle."""
    _ledger(11, rows=120)
    assert views.keep_finished_points() > 0
    for scope, tenant in ((0, None), (42, 42), (7, 7)):
        for window, (minutes, step, _) in views.SERIES_WINDOWS.items():
            with get_engine().connect() as c:
                kept = int(c.execute(sa.text("SELECT count(*) FROM ops_series_points WHERE scope = :s AND "
                                             "step_minutes = :m"), {"s": scope, "m": step}).scalar_one())
            assert kept >= minutes // step - 2, (scope, window, kept)  # all but the one or two still moving
            _same_as_the_oracle(tenant, window)
    assert views.keep_finished_points() in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)  # only points finished since, if any


def test_a_three_minute_breach_shows_its_peak_at_1h_24h_and_7d(db) -> None:  # type: ignore[no-untyped-def]
    """Invariant: a longer window keeps each point's worst, never its end alone. One message came due 30 minutes
    ago and was sent 3 minutes later (the oldest owed age peaked at 180 s, three times the 60 s SLO, and has been 0 s
    since): at 1 h, 24 h and 7 d — computed fresh, and read back once kept — the chart's highest oldest age is
    180 s, its highest depth 1, its sent count 1 (a count is summed, not maxed) and its slowest latency 180 s.
    Read at each point's end, the 24 h and 7 d charts showed a flat 0 s."""
    with get_engine().begin() as c:
        c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts, created_at, next_attempt_at, sent_at) VALUES (42, 'cust-001', "
            "'sms', 'normal', 'offer', '{}', 'ops-breach', 'SENT', 1, 1, 8, now() - interval '30 minutes 20 s', "
            "now() - interval '30 minutes 20 s', now() - interval '27 minutes 20 s')"))
    for read in ("computed", "kept"):
        for window in ("1h", "24h", "7d"):
            points = views.ops_series(42, window)
            peak = max(points, key=lambda p: p["oldest_seconds"])
            assert abs(peak["oldest_seconds"] - 180) < 0.01, (read, window, peak)
            assert max(p["depth"] for p in points) == 1, (read, window)
            assert sum(p["sent"] for p in points) == 1, (read, window)
            assert abs(max(p["latency_max_seconds"] for p in points) - 180) < 0.01, (read, window)
            if window == "1h":  # a spike, not a plateau: the last 20 minutes read 0 s
                assert all(p["oldest_seconds"] == 0 for p in points[-20:]), points[-20:]
            _same_as_the_oracle(42, window)
        assert views.keep_finished_points() >= 0

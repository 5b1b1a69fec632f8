"""Delivery's named SQL for its read models: what holds an owed row (state.py), the relay's scan of owed rows
(wakeups.py), /ops (views.py) and /metrics (telemetry.py)."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from domain.ledger.views import NOTIFICATION_COLUMNS
from domain.vocabulary import lanes_sql_list

# ---- what holds an owed row (state.py) --------------------------------------------------------------------------
# OWED_STATES: everything that holds each of a page of owed rows, in one statement.
# Everything that may hold a page of owed rows, in ONE statement: each row's lease and due time; its lane's pause
# with since when and by whom (the audit log's first pause after the lane's last resume; the flag's own time when
# no audit row says); its tenant endpoint's breaker; its tenant's balance when that is short of the row's price and
# the row holds no money yet, with since when (the newest balance entry after which the balance stayed short of
# the price, read newest first and only as far back as needed); its recipient's quiet hours; the last failed
# attempt (its number and HTTP status). A lane's pause and a (tenant, price)'s shortfall are read once, however
# many rows of the page share them. Rows not owed (or another tenant's, `:tenant_id` given) are simply not in the
# answer.
OWED_STATES = sa.text(
    """
    WITH n AS (
      SELECT id, tenant_id, lane, channel, recipient, attempts, next_attempt_at, leased_until, last_error_class,
             cost_cents, reserved_cents, endpoint_id, created_at
      FROM notifications
      WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'QUEUED'
        AND (CAST(:tenant_id AS int) IS NULL OR tenant_id = :tenant_id)
    ), paused AS (
      SELECT lc.lane, lc.updated_at, p.actor_ref, p.at
      FROM lane_controls lc
      LEFT JOIN LATERAL (
        SELECT a.actor_ref, a.at FROM operator_actions a
        WHERE a.tenant_id IS NULL AND a.action = 'pause' AND a.target = 'lane ' || lc.lane
          AND a.id > coalesce((SELECT max(r.id) FROM operator_actions r WHERE r.tenant_id IS NULL
                               AND r.action = 'resume' AND r.target = 'lane ' || lc.lane), 0)
        ORDER BY a.id LIMIT 1) p ON true
      WHERE lc.paused AND lc.lane IN (SELECT lane FROM n)
    ), short AS (
      SELECT x.tenant_id, x.cost_cents, b.balance_cents,
             (SELECT w.newer_at FROM (
                SELECT e.id, lag(e.created_at) OVER (ORDER BY e.id DESC) AS newer_at,
                       b.balance_cents - coalesce(sum(e.amount_cents) OVER (
                         ORDER BY e.id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS after_it
                FROM balance_entries e WHERE e.tenant_id = x.tenant_id ORDER BY e.id DESC) w
              WHERE w.after_it >= x.cost_cents ORDER BY w.id DESC LIMIT 1) AS since
      FROM (SELECT DISTINCT tenant_id, cost_cents FROM n WHERE cost_cents > 0 AND reserved_cents = 0) x
      JOIN balances b ON b.tenant_id = x.tenant_id AND b.balance_cents < x.cost_cents
    )
    SELECT n.id, n.lane, n.channel, n.attempts, n.next_attempt_at, n.leased_until, n.last_error_class,
           n.cost_cents, n.reserved_cents, n.endpoint_id,
           p.lane IS NOT NULL AS lane_paused, coalesce(p.at, p.updated_at) AS paused_since, p.actor_ref AS paused_by,
           we.breaker_open_until, coalesce(we.failure_streak, 0) AS failure_streak,
           s.balance_cents AS short_balance_cents, s.since AS short_since,
           r.timezone, r.quiet_start, r.quiet_end,
           la.attempt_no AS failed_attempt_no, la.status_code AS failed_status_code
    FROM n
    LEFT JOIN paused p ON p.lane = n.lane
    LEFT JOIN webhook_endpoints we ON n.endpoint_id IS NOT NULL AND we.id = n.endpoint_id
                                   AND we.tenant_id = n.tenant_id
    LEFT JOIN short s ON n.reserved_cents = 0 AND s.tenant_id = n.tenant_id AND s.cost_cents = n.cost_cents
    LEFT JOIN recipients r ON n.channel <> 'webhook' AND r.tenant_id = n.tenant_id AND r.ref = n.recipient
    LEFT JOIN LATERAL (
      SELECT a.attempt_no, a.status_code FROM notification_attempts a
      WHERE a.notification_id = n.id AND a.notification_created_at = n.created_at AND a.outcome = 'retry'
      ORDER BY a.id DESC LIMIT 1) la ON n.last_error_class IS NOT NULL
    """)

# ---- relay / recovery scan: only owed rows, through the partial index notifications_owed ------------------------
_SCAN_OWED = (
    "SELECT n.id, n.lane, n.tenant_id, n.campaign_id, n.event_id, n.next_attempt_at, n.created_at, "
    "n.leased_until IS NOT NULL AS lease_expired, "
    "(n.leased_until IS NULL AND n.next_attempt_at < now() - make_interval(secs => :lease)) AS overdue "
    "FROM notifications n "
    "WHERE n.status = 'QUEUED' AND n.id > :after AND n.next_attempt_at <= now() + make_interval(secs => :horizon) "
    "AND (n.leased_until IS NULL OR n.leased_until < now()) "
    # A paused lane needs no wake-ups; resuming it NOTIFYs the relay.
    "AND NOT EXISTS (SELECT 1 FROM lane_controls c WHERE c.lane = n.lane AND c.paused) {lane}"
    "ORDER BY n.id LIMIT :limit FOR UPDATE OF n SKIP LOCKED"
)


# SCAN_OWED: every lane's owed rows due soon, after an id, locked while the relay reads them.
SCAN_OWED = sa.text(_SCAN_OWED.format(lane=""))


# SCAN_OWED_LANE: one lane's owed rows due soon, after an id, locked while the relay reads them.
# One lane's oldest owed rows, through the partial index notifications_owed_by_lane (lane, id): the relay keeps
# at most a window of each lane's wake-ups in Redis, so a 40,000-message campaign costs it a window, not 40,000.
SCAN_OWED_LANE = sa.text(_SCAN_OWED.format(lane="AND n.lane = :lane "))
# EXPLAIN_SCAN_OWED_LANE: the plan of `SCAN_OWED_LANE`, as the scan benchmark keeps it.
EXPLAIN_SCAN_OWED_LANE = sa.text("EXPLAIN " + _SCAN_OWED.format(lane="AND n.lane = :lane "))

# SCAN_OWED_FLOW: one bulk flow's oldest owed rows after an id, locked while the relay reads them.
# The bulk lane's fair window (fair_queue.py): the lane's flows (`sql.BULK_DUE_FLOWS`, the skip scan one index probe per
# flow), then each flow's oldest owed rows by the same index.
SCAN_OWED_FLOW = sa.text(_SCAN_OWED.format(
    lane="AND n.lane = 'bulk' AND n.tenant_id = :tenant_id AND coalesce(n.campaign_id, 0) = :campaign_id "))
# SET_TENANT_BULK_RATE: a tenant's own bulk pace set (NULL: the lane's default).
SET_TENANT_BULK_RATE = sa.text(
    "UPDATE tenants SET bulk_rate_per_second = :rate WHERE id = :tenant_id RETURNING id")

# PUSH_LATENCY: one live-view push's latency kept.
PUSH_LATENCY = sa.text(
    "INSERT INTO refresh_metrics (kind, tenant_id, latency_ms) VALUES ('push', :tenant_id, :latency_ms)")

# ---- /ops (views.py) --------------------------------------------------------------------------------------------
# LANE_STATS: each lane's owed, scheduled and overdue counts and its oldest due age (/ops).
LANE_STATS = sa.text(
    """
    SELECT l.lane,
           -- Owed work is what is DUE: a nudge scheduled for later is counted apart, never as overdue. Its age
           -- is how long it has been due and waiting (since creation, or since its retry or schedule came due).
           count(n.id) FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at <= now()) AS depth,
           coalesce(extract(epoch FROM now() - min(n.next_attempt_at)
                                             FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at <= now())), 0)
               AS oldest_owed_seconds,
           count(n.id) FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at > now()) AS scheduled,
           min(n.next_attempt_at) FILTER (WHERE n.status = 'QUEUED' AND n.next_attempt_at > now()) AS next_due,
           coalesce(sum(n.attempts), 0) AS attempts,
           count(n.id) FILTER (WHERE n.status = 'FAILED') AS failed,
           count(n.id) FILTER (WHERE n.review = 'needs_review') AS review,
           coalesce(bool_or(c.paused), false) AS paused
    FROM unnest(ARRAY[{lanes}]) AS l(lane)
    LEFT JOIN notifications n ON n.lane = l.lane AND (CAST(:tenant_id AS int) IS NULL OR n.tenant_id = :tenant_id)
    LEFT JOIN lane_controls c ON c.lane = l.lane
    GROUP BY l.lane
    ORDER BY array_position(ARRAY[{lanes}], l.lane)
    """.format(lanes=lanes_sql_list())
)


# LANE_LATENCY: each lane's send latency, p50 and p99, over recent attempts.
LANE_LATENCY = sa.text(
    "SELECT n.lane, percentile_cont(0.5) WITHIN GROUP (ORDER BY a.latency_ms) AS p50, "
    "percentile_cont(0.99) WITHIN GROUP (ORDER BY a.latency_ms) AS p99, count(*) AS n "
    "FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id "
    "WHERE a.latency_ms IS NOT NULL AND (CAST(:tenant_id AS int) IS NULL OR n.tenant_id = :tenant_id) GROUP BY n.lane"
)


# OPS_SERIES_STARTS: the starts of /ops' chart points over a span of minutes.
# /ops' charts: per point (a span of :step minutes from t to e, e never past now), the WORST of the span — the most
# rows owed at once and the age of the oldest owed row at its oldest — and the rows sent in it (a count: a longer
# span sums them), with their mean and slowest commit-to-send time. A point taken at its end alone hid a 3-minute
# breach that began and ended inside one 15-minute point. A row is owed at τ when it is owed now and came due by τ
# (interval A: from greatest(created, due), never ends), or left the owed set after τ having been created by τ
# (interval C: from created to when it left or came due again, whichever is first): A and C never overlap, so a row
# counts once. Rows are read through two indexes (the partial owed index, notifications_done_at): the owed ones,
# and the ones that left after the span began. The depth at its peak is the depth at t plus the highest running sum
# of the span's +1/-1 steps (a row leaving at the instant another arrives is counted gone first: owed ends are
# exclusive). A finished point (ended a minute ago or more) is computed once and kept in ops_series_points; a
# refresh computes only the points still moving.
OPS_SERIES_STARTS = sa.text(
    """
    SELECT generate_series(to_timestamp(floor(extract(epoch FROM x.now) / (:step * 60)) * (:step * 60))
                             - make_interval(mins => :window - :step),
                           to_timestamp(floor(extract(epoch FROM x.now) / (:step * 60)) * (:step * 60)),
                           make_interval(mins => :step)) AS t, x.now,
           -- Points ending by `settled` are finished: their span ended :settle seconds ago, and no transaction
           -- still open began before it (its rows will carry its start time, whenever it commits — a worker
           -- stopped between its UPDATE and its COMMIT). Sessions of other roles show no xact_start to a role
           -- without pg_read_all_stats; for those the margin alone stands.
           least(x.now - make_interval(secs => :settle),
                 (SELECT min(a.xact_start) FROM pg_stat_activity a
                  WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                    AND a.backend_type = 'client backend')) AS settled
    FROM (SELECT coalesce(CAST(:now AS timestamptz), now()) AS now) x
    """)
# OPS_SERIES_POINTS: /ops' chart points: the worst depth and oldest age of each span, and its sends.
OPS_SERIES_POINTS = sa.text(
    """
    WITH b AS (SELECT t, least(t + make_interval(mins => :step), CAST(:now AS timestamptz)) AS e
               FROM unnest(CAST(:starts AS timestamptz[])) AS t)
    SELECT b.t AS at, w.depth_max, w.oldest_max_seconds, lat.sent, lat.mean_s AS latency_mean_seconds,
           lat.max_s AS latency_max_seconds
    FROM b
    CROSS JOIN LATERAL (
      WITH r AS (
        SELECT n.created_at AS c,
               CASE WHEN n.status = 'QUEUED' THEN greatest(n.created_at, n.next_attempt_at) END AS a0,
               -- least() skips a NULL: a row owed now that never left has no interval C at all.
               CASE WHEN n.status <> 'QUEUED' THEN coalesce(n.sent_at, n.settled_at)
                    WHEN coalesce(n.sent_at, n.settled_at) IS NOT NULL
                      THEN least(coalesce(n.sent_at, n.settled_at), n.next_attempt_at) END AS ce,
               -- Rows still owed are aged from when they came due (a scheduled nudge is not late before its time).
               CASE WHEN n.status = 'QUEUED' THEN n.next_attempt_at ELSE n.created_at END AS aged_from
        FROM notifications n
        WHERE n.created_at <= b.e AND (CAST(:tenant_id AS int) IS NULL OR n.tenant_id = :tenant_id)
          AND ((n.status = 'QUEUED' AND n.next_attempt_at <= b.e) OR coalesce(n.sent_at, n.settled_at) > b.t)
      ), steps AS (
        SELECT a0 AS at, 1 AS d FROM r WHERE a0 > b.t AND a0 <= b.e
        UNION ALL SELECT c, 1 FROM r WHERE c > b.t AND ce > c
        UNION ALL SELECT ce, -1 FROM r WHERE ce > b.t AND ce <= b.e AND ce > c
      )
      SELECT (SELECT count(*) FROM r WHERE a0 <= b.t OR (c <= b.t AND ce > b.t))
               + coalesce((SELECT greatest(0, max(run)) FROM (
                   SELECT sum(d) OVER (ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS run FROM steps) s), 0)
               AS depth_max,
             coalesce((SELECT greatest(0, max(extract(epoch FROM
                         CASE WHEN a0 <= b.e THEN b.e ELSE least(b.e, ce) END - aged_from)))
                       FROM r WHERE a0 <= b.e OR (ce > b.t AND ce > c)), 0) AS oldest_max_seconds
    ) w
    CROSS JOIN LATERAL (
      -- Commit to send, for rows owed at once: journey nudges are scheduled for later by design.
      SELECT count(*) AS sent, coalesce(avg(extract(epoch FROM n.sent_at - n.created_at)), 0) AS mean_s,
             coalesce(max(extract(epoch FROM n.sent_at - n.created_at)), 0) AS max_s
      FROM notifications n
      WHERE coalesce(n.sent_at, n.settled_at) >= b.t
        AND coalesce(n.sent_at, n.settled_at) < b.t + make_interval(mins => :step)
        AND n.sent_at IS NOT NULL AND n.intent_id IS NULL
        AND (CAST(:tenant_id AS int) IS NULL OR n.tenant_id = :tenant_id)) lat
    ORDER BY b.t
    """)
# OPS_SERIES_WHOLE_LEDGER: the same points by brute force over the whole ledger (the reference).
# The same points by brute force over the whole ledger: the depth counted afresh at every instant of a span where it
# can peak (its start, and each moment a row becomes owed in it), the oldest age at its end and just before each
# row's leaving. No sweep, no index: the reference the rollup must equal (tests/integration/test_ops_series.py) and
# the bench's raw baseline.
OPS_SERIES_WHOLE_LEDGER = sa.text(
    """
    WITH x AS (SELECT coalesce(CAST(:now AS timestamptz), now()) AS now),
    b AS (
      SELECT g.t, least(g.t + make_interval(mins => :step), x.now) AS e
      FROM x, generate_series(to_timestamp(floor(extract(epoch FROM x.now) / (:step * 60)) * (:step * 60))
                                - make_interval(mins => :window - :step),
                              to_timestamp(floor(extract(epoch FROM x.now) / (:step * 60)) * (:step * 60)),
                              make_interval(mins => :step)) AS g(t)
    ),
    r AS (
      SELECT n.created_at AS c, n.status = 'QUEUED' AS owed, n.next_attempt_at AS due,
             coalesce(n.sent_at, n.settled_at) AS left_at,
             CASE WHEN n.status = 'QUEUED' THEN n.next_attempt_at ELSE n.created_at END AS aged_from,
             n.sent_at, n.intent_id
      FROM notifications n WHERE (CAST(:tenant_id AS int) IS NULL OR n.tenant_id = :tenant_id)
    ),
    depth_at AS (
      SELECT b.t, b.t AS i FROM b
      UNION SELECT b.t, s.i FROM b JOIN (SELECT c AS i FROM r UNION SELECT greatest(c, due) FROM r WHERE owed) s
                                ON s.i > b.t AND s.i <= b.e
    ),
    age_at AS (
      SELECT b.t, b.e AS i FROM b
      UNION SELECT b.t, r.left_at - interval '1 microsecond' FROM b JOIN r ON r.left_at > b.t AND r.left_at <= b.e
    )
    SELECT to_char(b.t AT TIME ZONE 'UTC', CAST(:label_format AS text)) AS minute,
           (SELECT max((SELECT count(*) FROM r WHERE r.c <= d.i AND ((r.owed AND r.due <= d.i) OR r.left_at > d.i)))
              FROM depth_at d WHERE d.t = b.t) AS depth,
           (SELECT coalesce(greatest(0, max((SELECT extract(epoch FROM max(a.i - r.aged_from)) FROM r
                                             WHERE r.c <= a.i AND ((r.owed AND r.due <= a.i) OR r.left_at > a.i)))), 0)
              FROM age_at a WHERE a.t = b.t) AS oldest_seconds,
           (SELECT count(*) FROM r WHERE r.sent_at >= b.t AND r.sent_at < b.t + make_interval(mins => :step)
              AND r.intent_id IS NULL) AS sent,
           (SELECT coalesce(max(extract(epoch FROM r.sent_at - r.c)), 0) FROM r
             WHERE r.sent_at >= b.t AND r.sent_at < b.t + make_interval(mins => :step) AND r.intent_id IS NULL)
             AS latency_max_seconds,
           (SELECT coalesce(avg(extract(epoch FROM r.sent_at - r.c)), 0) FROM r
             WHERE r.sent_at >= b.t AND r.sent_at < b.t + make_interval(mins => :step) AND r.intent_id IS NULL)
             AS latency_mean_seconds
    FROM b ORDER BY b.t
    """)
# OPS_SERIES_KEPT: the finished chart points already kept.
OPS_SERIES_KEPT = sa.text(
    "SELECT t AS at, depth_max, oldest_max_seconds, sent, latency_mean_seconds, latency_max_seconds "
    "FROM ops_series_points WHERE scope = :scope AND step_minutes = :step AND t = ANY(CAST(:starts AS timestamptz[]))")
# OPS_SERIES_KEEP: finished chart points kept, once each.
OPS_SERIES_KEEP = sa.text(
    "INSERT INTO ops_series_points (scope, step_minutes, t, depth_max, oldest_max_seconds, sent, "
    "latency_mean_seconds, latency_max_seconds) "
    "SELECT :scope, :step, * FROM unnest(CAST(:starts AS timestamptz[]), CAST(:depth AS bigint[]), "
    "CAST(:oldest AS float8[]), CAST(:sent AS bigint[]), CAST(:mean AS float8[]), CAST(:max AS float8[])) "
    "ON CONFLICT DO NOTHING")

# REVIEW_ITEMS: the 50 newest failed rows not yet resolved.
REVIEW_ITEMS = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE (CAST(:tenant_id AS integer) IS NULL "
    "OR n.tenant_id = :tenant_id) AND n.status = 'FAILED' "
    "AND coalesce(n.review, 'needs_review') <> 'resolved' ORDER BY n.id DESC LIMIT 50")
# REFRESH_STATS: live-view pushes in the last hour with their latency p50 and p99.
REFRESH_STATS = sa.text(
    "SELECT count(*) AS pushes, percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50, "
    "percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms) AS p99 FROM refresh_metrics "
    "WHERE kind = 'push' AND created_at > now() - interval '1 hour' "
    "AND (CAST(:tenant_id AS int) IS NULL OR tenant_id = :tenant_id)")
# TENANTS: every tenant's id and name.
TENANTS = sa.text("SELECT id, name FROM tenants ORDER BY id")

# ---- /metrics (telemetry.py) ------------------------------------------------------------------------------------
# Upper bounds in seconds. One attempt's HTTP round trip, and commit to send (the SLO's 60 s is a bound).
SEND_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DELIVERY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


def _filters(expr: str, buckets: tuple[float, ...]) -> str:
    return ", ".join(f"count(*) FILTER (WHERE {expr} <= {b!r}) AS b{i}" for i, b in enumerate(buckets))


# SEND_LATENCY: each lane's HTTP round-trip histogram (/metrics).
SEND_LATENCY = sa.text(f"""
SELECT n.lane, count(*) AS n, coalesce(sum(a.latency_ms), 0) / 1000.0 AS total,
       {_filters("a.latency_ms / 1000.0", SEND_BUCKETS)}
FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
WHERE a.latency_ms IS NOT NULL GROUP BY n.lane""")
# DELIVERY_LATENCY: each lane's commit-to-send histogram (/metrics).
# Commit to send, for rows that were owed at once: journey nudges are scheduled for later by design.
DELIVERY_LATENCY = sa.text(f"""
SELECT lane, count(*) AS n, coalesce(sum(extract(epoch FROM sent_at - created_at)), 0) AS total,
       {_filters("extract(epoch FROM sent_at - created_at)", DELIVERY_BUCKETS)}
FROM notifications WHERE sent_at IS NOT NULL AND intent_id IS NULL GROUP BY lane""")
# ATTEMPT_OUTCOMES: attempts by lane, outcome and error class (/metrics).
ATTEMPT_OUTCOMES = sa.text("""
SELECT n.lane, a.outcome, coalesce(a.error_class, '') AS error_class, count(*) AS n
FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
GROUP BY n.lane, a.outcome, coalesce(a.error_class, '')""")
# TENANT_MONEY: each tenant's balance and what it spent in the last hour (/metrics).
TENANT_MONEY = sa.text("""
SELECT b.tenant_id, b.balance_cents,
       coalesce((SELECT -sum(e.amount_cents) FROM balance_entries e WHERE e.tenant_id = b.tenant_id
                 AND e.kind IN ('reserve', 'refund') AND e.created_at > now() - interval '1 hour'), 0)
         AS spent_last_hour_cents
FROM balances b ORDER BY b.tenant_id""")

"""SQL that matters, written once and named: claims, scans, invariants. Used by code, tests and the ops screen."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from domain.queue import NOTIFY_CHANNEL, lanes_sql_list

# ---- order command -------------------------------------------------------------------------------------------
# A plain read (no FOR UPDATE): the guarded UPDATE below is what settles a race.
READ_ORDER = sa.text(
    "SELECT id, tenant_id, status, revision, customer_ref FROM orders "
    "WHERE tenant_id = :tenant_id AND id = :order_id"
)

UPDATE_ORDER_GUARDED = sa.text(
    "UPDATE orders SET status = :to_status, revision = revision + 1, updated_at = now() "
    "WHERE tenant_id = :tenant_id AND id = :order_id AND revision = :expected_revision "
    "RETURNING revision"
)

# ---- worker claim: a lease, guarded by status and time, and the next fence token ---------------------------------
# One round trip: the guarded lease and its token, plus what the worker needs to decide and send (envelope, order
# status, the intent and the campaign it belongs to).
CLAIM_NOTIFICATION = sa.text(
    """
    WITH c AS (
      UPDATE notifications SET attempts = attempts + 1, leased_until = now() + make_interval(secs => :lease),
                               claimed_at = now(), claim_token = claim_token + 1
      WHERE id = :id AND status = 'QUEUED' AND next_attempt_at <= now() + interval '1 second'
        AND (leased_until IS NULL OR leased_until < now())
        AND NOT EXISTS (SELECT 1 FROM lane_controls l WHERE l.lane = notifications.lane AND l.paused)
      RETURNING id, tenant_id, recipient, channel, lane, template, payload, dedupe_key, cost_cents, attempts,
                max_attempts, event_id, order_id, intent_id, campaign_id, reserved_cents, cap_day, claim_token,
                provider_key
    )
    SELECT c.*, o.status AS order_status, e.aggregate_type, e.aggregate_id, e.aggregate_revision, e.event_type,
           e.schema_version, e.occurred_at, e.request_id, e.causation_id, e.actor_ref, e.payload AS event_payload,
           i.status AS intent_status, i.step AS intent_step, ld.current_step AS lead_step,
           cp.status AS campaign_status
    FROM c
    LEFT JOIN outbox_events e ON e.event_id = c.event_id
    LEFT JOIN orders o ON o.tenant_id = c.tenant_id AND o.id = c.order_id
    LEFT JOIN lead_notification_intents i ON i.id = c.intent_id
    LEFT JOIN leads ld ON ld.id = i.lead_id
    LEFT JOIN campaigns cp ON cp.id = c.campaign_id
    """
)

# ---- relay / recovery scan: only owed rows, through the partial index notifications_owed ------------------------
_SCAN_OWED = (
    "SELECT n.id, n.lane, n.next_attempt_at, n.leased_until IS NOT NULL AS lease_expired, "
    "(n.leased_until IS NULL AND n.next_attempt_at < now() - make_interval(secs => :lease)) AS overdue "
    "FROM notifications n "
    "WHERE n.status = 'QUEUED' AND n.id > :after AND n.next_attempt_at <= now() + make_interval(secs => :horizon) "
    "AND (n.leased_until IS NULL OR n.leased_until < now()) "
    # A paused lane needs no wake-ups; resuming it NOTIFYs the relay.
    "AND NOT EXISTS (SELECT 1 FROM lane_controls c WHERE c.lane = n.lane AND c.paused) {lane}"
    "ORDER BY n.id LIMIT :limit FOR UPDATE OF n SKIP LOCKED"
)
SCAN_OWED = sa.text(_SCAN_OWED.format(lane=""))
# One lane's oldest owed rows, through the partial index notifications_owed_by_lane (lane, id): the relay keeps
# at most a window of each lane's wake-ups in Redis, so a 40,000-message campaign costs it a window, not 40,000.
SCAN_OWED_LANE = sa.text(_SCAN_OWED.format(lane="AND n.lane = :lane "))

NOTIFY_OWED = sa.text(f"SELECT pg_notify('{NOTIFY_CHANNEL}', :lane)")

# ---- operations --------------------------------------------------------------------------------------------------
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
    LEFT JOIN notifications n ON n.lane = l.lane AND (CAST(:t AS int) IS NULL OR n.tenant_id = :t)
    LEFT JOIN lane_controls c ON c.lane = l.lane
    GROUP BY l.lane
    ORDER BY array_position(ARRAY[{lanes}], l.lane)
    """.format(lanes=lanes_sql_list())
)

LANE_LATENCY = sa.text(
    "SELECT n.lane, percentile_cont(0.5) WITHIN GROUP (ORDER BY a.latency_ms) AS p50, "
    "percentile_cont(0.99) WITHIN GROUP (ORDER BY a.latency_ms) AS p99, count(*) AS n "
    "FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id "
    "WHERE a.latency_ms IS NOT NULL AND (CAST(:t AS int) IS NULL OR n.tenant_id = :t) GROUP BY n.lane"
)

# ---- invariants (ARCHITECTURE.md): each must return 0 -----------------------------------------------------------
# Invariant 4 (one effect per event id and effect type) lives at the receiver: we never read its tables; `outbox
# check` asks its HTTP API.
INVARIANTS: Final[dict[str, str]] = {
    "1 committed revision without outbox event": """
        SELECT count(*) FROM orders o
        CROSS JOIN LATERAL generate_series(o.base_revision + 1, o.revision) AS r(rev)
        WHERE NOT EXISTS (
          SELECT 1 FROM outbox_events e WHERE e.tenant_id = o.tenant_id AND e.aggregate_type = 'order'
            AND e.aggregate_id = o.id::text AND e.aggregate_revision = r.rev)
    """,
    "2 outbox event for a revision never committed": """
        SELECT count(*) FROM outbox_events e
        LEFT JOIN orders o ON o.tenant_id = e.tenant_id AND o.id::text = e.aggregate_id
        WHERE e.aggregate_type = 'order'
          AND (o.id IS NULL OR e.aggregate_revision > o.revision OR e.aggregate_revision <= o.base_revision)
    """,
    "3 two live intents for one lead": """
        SELECT count(*) FROM (SELECT lead_id FROM lead_notification_intents
          WHERE status IN ('pending','scheduled') GROUP BY lead_id HAVING count(*) > 1) x
    """,
    "5 sent without its charge, a message's entries not matching what it holds, or a negative balance": """
        SELECT (SELECT count(*) FROM notifications n
                WHERE n.status IN ('SENT','DELIVERED') AND n.cost_cents > 0 AND n.reserved_cents <> n.cost_cents)
             + (SELECT count(*) FROM notifications n
                WHERE n.reserved_cents <> -coalesce((SELECT sum(b.amount_cents) FROM balance_entries b
                                                      WHERE b.notification_id = n.id), 0))
             + (SELECT count(*) FROM balances WHERE balance_cents < 0)
    """,
    "6 suppressed without a reason": """
        SELECT count(*) FROM notifications WHERE status = 'SUPPRESSED' AND suppressed_reason IS NULL
    """,
    "7 a tenant whose balance entries do not sum to its balance": """
        SELECT count(*) FROM balances b
        WHERE b.balance_cents <> coalesce((SELECT sum(e.amount_cents) FROM balance_entries e
                                          WHERE e.tenant_id = b.tenant_id), 0)
    """,
    # What a message holds, by its status: a sent one its price (never refunded), an unsent one nothing.
    "8 a sent message refunded, or an unsent message still charged": """
        SELECT count(*) FROM notifications n
        WHERE (n.status IN ('SENT','DELIVERED') AND n.reserved_cents <> n.cost_cents AND n.cost_cents > 0)
           OR (n.status IN ('FAILED','SUPPRESSED') AND (n.reserved_cents <> 0 OR n.cap_day IS NOT NULL))
    """,
    # An attempt the other side accepted (2xx) is the truth: its row says sent (or, after a provider's `failed`
    # receipt, undeliverable), unless an operator replayed the row after that attempt.
    "9 an accepted attempt whose message says it was never sent": """
        SELECT count(DISTINCT a.notification_id) FROM notification_attempts a
        JOIN notifications n ON n.id = a.notification_id
        WHERE a.status_code BETWEEN 200 AND 299
          AND (n.status = 'SUPPRESSED'
               OR (n.status = 'FAILED' AND n.last_error_class IS DISTINCT FROM 'undeliverable')
               OR (n.status = 'QUEUED' AND (n.replayed_at IS NULL OR a.finished_at > n.replayed_at)))
    """,
    "10 a live nudge with no message left owed (a phantom intent)": """
        SELECT count(*) FROM lead_notification_intents i
        WHERE i.status IN ('pending','scheduled')
          AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.intent_id = i.id AND n.status = 'QUEUED')
    """,
}

OPS_SERIES = sa.text(
    """
    WITH minutes AS (
      SELECT generate_series(date_trunc('minute', now()) - make_interval(mins => :m - 1),
                             date_trunc('minute', now()), interval '1 minute') AS t
    )
    SELECT to_char(m.t, 'HH24:MI') AS minute,
           (SELECT count(*) FROM notifications n
             WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t) AND n.created_at <= m.t + interval '1 minute'
               AND ((n.status = 'QUEUED' AND n.next_attempt_at <= m.t + interval '1 minute')
                    OR coalesce(n.sent_at, n.settled_at) > m.t + interval '1 minute')) AS depth,
           -- Rows still owed are aged from when they came due (a scheduled nudge is not late before its time).
           (SELECT coalesce(extract(epoch FROM max(m.t + interval '1 minute'
                     - CASE WHEN n.status = 'QUEUED' THEN n.next_attempt_at ELSE n.created_at END)), 0)
             FROM notifications n
             WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t) AND n.created_at <= m.t + interval '1 minute'
               AND ((n.status = 'QUEUED' AND n.next_attempt_at <= m.t + interval '1 minute')
                    OR coalesce(n.sent_at, n.settled_at) > m.t + interval '1 minute'))
             AS oldest_seconds,
           (SELECT coalesce(avg(extract(epoch FROM n.sent_at - n.created_at) * 1000), 0) FROM notifications n
             WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t) AND n.sent_at >= m.t AND n.sent_at < m.t + interval '1 minute') AS latency_ms
    FROM minutes m ORDER BY m.t
    """
)

"""Webhook endpoints' named SQL, in one place (store.py runs them). Every statement filters on the tenant: another
tenant's endpoint is exactly a missing one. No read but `SECRETS` (the sender's) returns a secret."""

from __future__ import annotations

import sqlalchemy as sa

PUBLIC_COLUMNS = ("id, url, description, event_types, disabled_at IS NULL AS enabled, created_at, updated_at, "
                  "previous_secret_until, disabled_reason, failure_streak, breaker_open_until")

# CREATE: a tenant's new webhook endpoint, answering its public columns.
CREATE = sa.text(
    "INSERT INTO webhook_endpoints (tenant_id, url, description, event_types, secret) "
    "VALUES (:t, :u, :d, CAST(:e AS jsonb), :s) RETURNING " + PUBLIC_COLUMNS)
# LIST: a keyset page of a tenant's endpoints: newest first older than `b`, or just newer than `a`.
LIST = sa.text(
    f"SELECT {PUBLIC_COLUMNS} FROM webhook_endpoints WHERE tenant_id = :t "
    "AND (CAST(:b AS bigint) IS NULL OR id < :b) AND (CAST(:a AS bigint) IS NULL OR id > :a) "
    "ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -id ELSE id END LIMIT :l")
# GET: one of a tenant's endpoints.
GET = sa.text(f"SELECT {PUBLIC_COLUMNS} FROM webhook_endpoints WHERE tenant_id = :t AND id = :i")
# SET_ENABLED: an endpoint enabled or disabled.
# Enabling closes the breaker and forgets the failures; disabling keeps who did it (the claim says so on each row
# it settles unsent).
SET_ENABLED = sa.text(
    "UPDATE webhook_endpoints SET disabled_at = CASE WHEN :on THEN NULL ELSE coalesce(disabled_at, now()) END, "
    "disabled_reason = CASE WHEN :on THEN NULL ELSE coalesce(disabled_reason, :why) END, "
    "failure_streak = CASE WHEN :on THEN 0 ELSE failure_streak END, "
    "failing_since = CASE WHEN :on THEN NULL ELSE failing_since END, "
    "breaker_open_until = CASE WHEN :on THEN NULL ELSE breaker_open_until END, "
    f"updated_at = now() WHERE tenant_id = :t AND id = :i RETURNING {PUBLIC_COLUMNS}")
# DELETE: one of a tenant's endpoints deleted, answering its URL.
DELETE = sa.text("DELETE FROM webhook_endpoints WHERE tenant_id = :t AND id = :i RETURNING url")
# ROTATE: an endpoint's secret rotated, the previous one kept until a time.
ROTATE = sa.text(
    "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = :until, secret = :s, "
    f"updated_at = :now WHERE tenant_id = :t AND id = :i RETURNING {PUBLIC_COLUMNS}")
# LOCK_FOR_TEST: an endpoint locked for a test event, answering whether it is enabled.
# A test event's first step (domain/orders/trial.py): the endpoint locked, so two asks for a test take turns.
LOCK_FOR_TEST = sa.text("SELECT disabled_at IS NULL AS enabled FROM webhook_endpoints "
                        "WHERE tenant_id = :t AND id = :i FOR UPDATE")
# SECRETS: an endpoint's current and previous secrets.
SECRETS = sa.text("SELECT secret, previous_secret, previous_secret_until FROM webhook_endpoints "
                  "WHERE tenant_id = :t AND id = :i")

# ---- fan-out (the order command's transaction) ------------------------------------------------------------------
# Every endpoint of the tenant (`:t`), and whether it takes this event (`:et`) now: enabled, and the type is one it
# asked for.
_WANTS = "disabled_at IS NULL AND (event_types IS NULL OR event_types @> jsonb_build_array(CAST(:et AS text)))"
# TARGETS: a tenant's endpoints and the events each wants (the fan-out's targets).
TARGETS = sa.text(f"SELECT id, {_WANTS} AS wants FROM webhook_endpoints WHERE tenant_id = :t ORDER BY id")
# TARGETS_SCALAR: `TARGETS` as one JSON scalar a statement can carry in its result.
# The same as one scalar, for a statement to carry in its own result (the order command's guarded update does, so
# the fan-out costs no round trip of its own): a JSON array of [id, wants] in id order; NULL when the tenant has no
# endpoint. Other rooms reach it as `store.targets_scalar()`.
TARGETS_SCALAR = (f"(SELECT jsonb_agg(jsonb_build_array(id, {_WANTS}) ORDER BY id) "
                  "FROM webhook_endpoints WHERE tenant_id = :t)")

# ---- send time (the worker): where to, and signed with what. Never in job args, logs or the claim record. ---------
# SEND_TARGET: an enabled endpoint's URL and secrets, at send time.
SEND_TARGET = sa.text(
    "SELECT url, secret, previous_secret, previous_secret_until FROM webhook_endpoints "
    "WHERE tenant_id = :t AND id = :i AND disabled_at IS NULL")

# ---- the circuit breaker (domain/endpoints/breaker.py decides; domain/delivery/circuit.py runs these) ------------
# NOTE_SUCCESS: an endpoint's failure streak and breaker cleared after a success.
NOTE_SUCCESS = sa.text(
    "UPDATE webhook_endpoints SET failure_streak = 0, failing_since = NULL, breaker_open_until = NULL "
    "WHERE tenant_id = :t AND id = :i AND (failure_streak <> 0 OR breaker_open_until IS NOT NULL)")
# NOTE_FAILURE: one more failure on an enabled endpoint, answering its streak.
# Locks the endpoint row until the caller commits: two workers' failures count one after the other.
NOTE_FAILURE = sa.text(
    "UPDATE webhook_endpoints SET failure_streak = failure_streak + 1, failing_since = coalesce(failing_since, :at) "
    "WHERE tenant_id = :t AND id = :i AND disabled_at IS NULL RETURNING failure_streak, failing_since, url")
# OPEN_BREAKER: an endpoint's breaker opened until a time.
OPEN_BREAKER = sa.text("UPDATE webhook_endpoints SET breaker_open_until = :until WHERE tenant_id = :t AND id = :i")
# TAKE_PROBE: the half-open probe taken by the first claim after the breaker's time.
# Half-open: the first claim after the breaker's time takes the one probe (and keeps the breaker open meanwhile).
TAKE_PROBE = sa.text(
    "UPDATE webhook_endpoints SET breaker_open_until = :until WHERE tenant_id = :t AND id = :i "
    "AND disabled_at IS NULL AND breaker_open_until <= :now RETURNING id")
# GIVE_BACK_PROBE: a probe given back, fenced by what it wrote.
# A probe given back with its claim (the worker will not send under it): fenced by what the probe wrote.
GIVE_BACK_PROBE = sa.text(
    "UPDATE webhook_endpoints SET breaker_open_until = :was WHERE tenant_id = :t AND id = :i "
    "AND breaker_open_until = :taken RETURNING id")
# BREAKER_UNTIL: until when an endpoint's breaker is open.
BREAKER_UNTIL = sa.text("SELECT breaker_open_until FROM webhook_endpoints WHERE tenant_id = :t AND id = :i")
# AUTO_DISABLE: an enabled endpoint disabled by the system, with why, answering its URL.
AUTO_DISABLE = sa.text(
    "UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = :why, breaker_open_until = NULL, "
    "updated_at = now() WHERE tenant_id = :t AND id = :i AND disabled_at IS NULL RETURNING url")

# ---- health, from the attempts (the list and the read) ------------------------------------------------------------
_OK = "('sent', 'already_processed', 'late_accept')"
_FAILED = "('retry', 'failed')"
# HEALTH: each of a tenant's endpoints' answers over the last 24 hours.
HEALTH = sa.text(
    f"""
    SELECT n.endpoint_id,
           count(*) FILTER (WHERE a.outcome IN {_OK} AND a.started_at > now() - interval '24 hours') AS ok_24h,
           count(*) FILTER (WHERE a.outcome IN {_FAILED} AND a.started_at > now() - interval '24 hours')
             AS failed_24h,
           max(a.finished_at) FILTER (WHERE a.outcome IN {_OK}) AS last_success_at,
           max(a.finished_at) FILTER (WHERE a.outcome IN {_FAILED}) AS last_error_at,
           (array_agg(a.error_class ORDER BY a.id DESC) FILTER (WHERE a.outcome IN {_FAILED}))[1] AS last_error,
           (array_agg(a.status_code ORDER BY a.id DESC) FILTER (WHERE a.outcome IN {_FAILED}))[1]
             AS last_error_status,
           (array_agg(a.response_excerpt ORDER BY a.id DESC) FILTER (WHERE a.outcome IN {_FAILED}))[1]
             AS last_error_excerpt
    FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
    WHERE n.tenant_id = :t AND n.endpoint_id = ANY(CAST(:ids AS bigint[]))
    GROUP BY n.endpoint_id
    """)
# AUTO_DISABLED_COUNTS: how many endpoints the system disabled, per tenant.
AUTO_DISABLED_COUNTS = sa.text(
    "SELECT tenant_id, count(*) AS n FROM operator_actions WHERE action = 'auto-disable webhook endpoint' "
    "GROUP BY tenant_id ORDER BY tenant_id")
# BREAKERS_OPEN: how many enabled endpoints have their breaker open now.
BREAKERS_OPEN = sa.text(
    "SELECT count(*) FROM webhook_endpoints WHERE disabled_at IS NULL AND breaker_open_until > now()")
# LATEST_ATTEMPTS: the last attempts of each endpoint shown, newest first.
# The last attempts of each endpoint shown (`:n` each, from its `:n` newest rows: index `notifications_endpoint`),
# newest first: what its page says about its latest sends.
LATEST_ATTEMPTS = sa.text(
    """
    SELECT ep.id AS endpoint_id, x.notification_id, x.template, x.started_at, x.outcome, x.status_code,
           x.error_class, x.response_excerpt, x.status
    FROM unnest(CAST(:ids AS bigint[])) AS ep(id)
    CROSS JOIN LATERAL (
      SELECT a.id, a.notification_id, n.template, a.started_at, a.outcome, a.status_code, a.error_class,
             a.response_excerpt, n.status
      FROM (SELECT id, template, status, created_at FROM notifications
            WHERE endpoint_id = ep.id AND tenant_id = :t ORDER BY id DESC LIMIT :n) n
      JOIN notification_attempts a ON a.notification_id = n.id AND a.notification_created_at = n.created_at
      ORDER BY a.id DESC LIMIT :n) x
    ORDER BY ep.id, x.id DESC
    """)
# LATEST_OF_TEMPLATE: each endpoint's latest row of one template (a test event's).
# Each endpoint's latest row of one template (the test event's), whatever its attempts, among its 1000 newest rows
# (a bound on the index walk: a test that old is no longer news).
LATEST_OF_TEMPLATE = sa.text(
    """
    SELECT ep.id AS endpoint_id, x.id, x.status, x.attempts, x.next_attempt_at, x.last_error_class
    FROM unnest(CAST(:ids AS bigint[])) AS ep(id)
    CROSS JOIN LATERAL (SELECT id, status, attempts, next_attempt_at, last_error_class
                        FROM (SELECT id, status, attempts, next_attempt_at, last_error_class, template
                              FROM notifications WHERE endpoint_id = ep.id AND tenant_id = :t
                              ORDER BY id DESC LIMIT 1000) r
                        WHERE r.template = :tpl ORDER BY id DESC LIMIT 1) x
    """)

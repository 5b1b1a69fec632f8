"""Delivery's named SQL for what operators do to it: a lane paused and resumed, failed rows replayed or resolved."""

from __future__ import annotations

import sqlalchemy as sa

# ---- lanes (lanes.py) and review (review.py) --------------------------------------------------------------------
# LANE_PAUSED: whether a lane is paused.
LANE_PAUSED = sa.text("SELECT paused FROM lane_controls WHERE lane = :lane")
# SET_LANE_PAUSED: a lane paused or resumed.
SET_LANE_PAUSED = sa.text(
    "INSERT INTO lane_controls (lane, paused) VALUES (:lane, :paused) "
    "ON CONFLICT (lane) DO UPDATE SET paused = :paused, updated_at = now()")
# `tenant_id` None = platform on-call, whose scope is every tenant; the action is recorded under the row's tenant.
_IN_SCOPE = "id = :id AND (CAST(:tenant_id AS integer) IS NULL OR tenant_id = :tenant_id) AND status = 'FAILED'"
_REPLAY_SET = (
    "UPDATE notifications SET status = 'QUEUED', review = NULL, next_attempt_at = now(), "
    "max_attempts = attempts + :extra_attempts, settled_at = NULL, leased_until = NULL, replayed_at = now(), "
    "provider_key = CASE WHEN last_error_class = 'undeliverable' "
    "  THEN dedupe_key || '~replay-' || (claim_token + 1) ELSE provider_key END, "
    "provider_reference = CASE WHEN last_error_class = 'undeliverable' THEN NULL ELSE provider_reference END, "
    "claim_token = claim_token + 1 ")
# A one-time code past its end of life is never owed again: every replay leaves it as it is (`code_expired`), and
# `REPLAY_REFUSED_*` name those rows with their end of life for the answer.
_CODE_ALIVE = ("NOT EXISTS (SELECT 1 FROM otp_codes oc WHERE oc.notification_id = notifications.id "
               "AND oc.expires_at <= now())")
_EXPIRED_CODES = (
    "SELECT n.id, oc.expires_at FROM notifications n JOIN otp_codes oc ON oc.notification_id = n.id "
    "WHERE oc.expires_at <= now() AND n.status = 'FAILED' "
    "AND (CAST(:tenant_id AS integer) IS NULL OR n.tenant_id = :tenant_id) ")
# REPLAY: one failed row of a tenant owed again (a code only while it is alive).
REPLAY = sa.text(f"{_REPLAY_SET} WHERE {_IN_SCOPE} AND {_CODE_ALIVE} RETURNING lane, tenant_id")
# REPLAY_WAITS_FOR_ARCHIVE: the shared lock a replay holds against an archive of a month.
# Shared with every replay, exclusive to an archive of a month (domain/retention/sql.py `ARCHIVE_EXCLUDES_REPLAY`).
REPLAY_WAITS_FOR_ARCHIVE = sa.text("SELECT pg_advisory_xact_lock_shared(hashtext('outbox archive'))")
# RESOLVE: one failed row of a tenant marked resolved.
RESOLVE = sa.text(f"UPDATE notifications SET review = 'resolved' WHERE {_IN_SCOPE} RETURNING id, tenant_id")
# Bulk review: the rows chosen by id, or every FAILED row of a lane that failed since :since and no human resolved.
# The status guard is the fence: a row replayed already (QUEUED again) or settled meanwhile matches nothing.
# FOR UPDATE SKIP LOCKED is not wanted here: a row locked by a concurrent replay is waited for, then re-checked.
_MANY = "id = ANY(:ids) AND (CAST(:tenant_id AS integer) IS NULL OR tenant_id = :tenant_id) AND status = 'FAILED'"
_LANE_FILTER = ("lane = :lane AND (CAST(:tenant_id AS integer) IS NULL OR tenant_id = :tenant_id) "
                "AND status = 'FAILED' "
                "AND coalesce(review, 'needs_review') <> 'resolved' AND coalesce(settled_at, created_at) >= :since")
_LANE_SINCE = (f"status = 'FAILED' AND id IN (SELECT id FROM notifications WHERE {_LANE_FILTER} "
               "ORDER BY id LIMIT :limit)")
_LANE_SINCE_ALIVE = (f"status = 'FAILED' AND id IN (SELECT id FROM notifications WHERE {_LANE_FILTER} "
                     f"AND {_CODE_ALIVE} ORDER BY id LIMIT :limit)")
# REPLAY_MANY: the chosen failed rows owed again (codes only while alive).
REPLAY_MANY = sa.text(f"{_REPLAY_SET} WHERE {_MANY} AND {_CODE_ALIVE} RETURNING id, lane, tenant_id")
# REPLAY_REFUSED_MANY: the chosen rows a replay refuses: one-time codes past their end of life.
REPLAY_REFUSED_MANY = sa.text(f"{_EXPIRED_CODES} AND n.id = ANY(:ids) ORDER BY n.id")
# RESOLVE_MANY: the chosen failed rows marked resolved.
RESOLVE_MANY = sa.text(f"UPDATE notifications SET review = 'resolved' WHERE {_MANY} "
                       "AND coalesce(review, 'needs_review') <> 'resolved' RETURNING id, lane, tenant_id")
# REPLAY_LANE_SINCE: every failed row of a lane since a time owed again (codes only while alive).
REPLAY_LANE_SINCE = sa.text(f"{_REPLAY_SET} WHERE {_LANE_SINCE_ALIVE} RETURNING id, lane, tenant_id")
# REPLAY_REFUSED_LANE: a lane's failed rows since a time that a replay refuses: codes past their end of life.
REPLAY_REFUSED_LANE = sa.text(
    f"{_EXPIRED_CODES} AND n.id IN (SELECT id FROM notifications WHERE {_LANE_FILTER}) ORDER BY n.id LIMIT :limit")
# RESOLVE_LANE_SINCE: every failed row of a lane since a time marked resolved.
RESOLVE_LANE_SINCE = sa.text(
    f"UPDATE notifications SET review = 'resolved' WHERE {_LANE_SINCE} RETURNING id, lane, tenant_id")
# COUNT_LANE_SINCE: how many failed rows of a lane since a time need review.
COUNT_LANE_SINCE = sa.text(f"SELECT count(*) FROM notifications WHERE {_LANE_FILTER}")
# COUNT_LANE_SINCE_REPLAYABLE: how many of them a replay would take (codes still alive).
COUNT_LANE_SINCE_REPLAYABLE = sa.text(f"SELECT count(*) FROM notifications WHERE {_LANE_FILTER} AND {_CODE_ALIVE}")

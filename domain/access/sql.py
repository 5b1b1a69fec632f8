"""What access asks of the database, named in one place: API keys, operators, the login throttle, the privileged-action
log, Idempotency-Key claims and the dashboard's sessions. Plain CRUD is Core over the one schema; `text()` for the
throttle's leaky bucket (one `INSERT … ON CONFLICT` that forgives and counts in the same statement).
"""

from __future__ import annotations

import sqlalchemy as sa

from domain.models import ApiKey, table_of

API_KEYS = table_of(ApiKey)

# TENANT_EXISTS: whether a tenant of that id exists.
TENANT_EXISTS = sa.text("SELECT 1 FROM tenants WHERE id = :t")
# INSERT_API_KEY: a new API key row (its hash, never the key).
INSERT_API_KEY = sa.insert(API_KEYS)
# PRINCIPAL_FOR_KEY: the tenant and actor of a live (unrevoked) API key, by the key's hash.
PRINCIPAL_FOR_KEY = sa.text("SELECT tenant_id, actor_ref FROM api_keys WHERE key_hash = :h AND revoked_at IS NULL")
# OPERATOR_BY_LOGIN: an operator by login, with its password hash and its tenant's name.
# Each with the operator's tenant's name (none for platform): the pages say "Northwind", never "tenant 42".
OPERATOR_BY_LOGIN = sa.text(
    "SELECT o.id, o.tenant_id, o.login, o.display_name, o.password_hash, o.role, "
    "(SELECT t.name FROM tenants t WHERE t.id = o.tenant_id) AS tenant_name FROM operators o WHERE o.login = :l")
# OPERATOR_NOW: an operator by id as it stands now (role, tenant), with its tenant's name.
OPERATOR_NOW = sa.text("SELECT o.id, o.tenant_id, o.login, o.display_name, o.role, "
                       "(SELECT t.name FROM tenants t WHERE t.id = o.tenant_id) AS tenant_name "
                       "FROM operators o WHERE o.id = :i")

# ---- the login throttle --------------------------------------------------------------------------------------
# LOCKED_UNTIL: until when any of the login throttle's keys is locked out (none: not locked).
LOCKED_UNTIL = sa.text("SELECT max(locked_until) FROM login_throttle WHERE key = ANY(:k) AND locked_until > :now")
# One statement: the failures left after the leak since `updated_at`, plus this one. `updated_at` advances only by
# the whole failures forgiven (the leak's remainder carries over), or to now when all were forgiven.
_FORGIVEN = "floor(GREATEST(extract(epoch FROM (CAST(:now AS timestamptz) - t.updated_at)), 0) / :leak)::int"
# RECORD_FAILURE: one more failed login on a throttle key, older failures forgiven with time.
RECORD_FAILURE = sa.text(f"""
INSERT INTO login_throttle AS t (key, failures, updated_at) VALUES (:k, 1, :now)
ON CONFLICT (key) DO UPDATE SET
  failures = GREATEST(t.failures - {_FORGIVEN}, 0) + 1,
  updated_at = CASE WHEN {_FORGIVEN} >= t.failures THEN CAST(:now AS timestamptz)
                    ELSE t.updated_at + make_interval(secs => {_FORGIVEN} * CAST(:leak AS float8)) END
RETURNING t.failures""")
# LOCK_OUT: a throttle key locked out until a time.
LOCK_OUT = sa.text("UPDATE login_throttle SET locked_until = :u WHERE key = :k")
# FORGET_FAILURES: a throttle key's failures forgotten (after a good login).
FORGET_FAILURES = sa.text("DELETE FROM login_throttle WHERE key = :k")

# ---- the privileged-action log -------------------------------------------------------------------------------
# RECORD_ACTION: one privileged action in the audit log (who, what, on what, why).
RECORD_ACTION = sa.text(
    "INSERT INTO operator_actions (tenant_id, actor_ref, action, target, note) VALUES (:t, :a, :w, :g, :n)")
# RECENT_ACTIONS: a keyset page of the audit log, one tenant's (with the platform's) or everyone's.
RECENT_ACTIONS = sa.text(
    "SELECT id, at, actor_ref, action, target, note, tenant_id FROM operator_actions "
    "WHERE (CAST(:t AS integer) IS NULL OR tenant_id = :t OR tenant_id IS NULL) "
    "AND (CAST(:b AS bigint) IS NULL OR id < :b) AND (CAST(:a AS bigint) IS NULL OR id > :a) "
    "ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -id ELSE id END LIMIT :l")

# ACTIONS_ON: the audit rows about one thing, oldest first.
# What was done to one thing (its audit rows, oldest first): `:g` is the target's exact name, and what follows it
# in a longer target is in parentheses ("campaign 12 (all_reachable, 300 people)").
ACTIONS_ON = sa.text(
    "SELECT id, at, actor_ref, action, target, note FROM operator_actions "
    "WHERE tenant_id = :t AND (target = :g OR starts_with(target, :g || ' (')) ORDER BY id LIMIT 50")

# LAST_ACTIONS_ON: the last audit row about each of several things, in one scan.
# The last action on each of several things (`:gs`, their names, each "<kind> <id>"), in one pass over the tenant's
# rows matched by hash: with `:p`, a longer target counts by its first two words ("endpoint 5 → https://…" is
# endpoint 5's, "endpoint 50" is not). An OR of equality and starts_with per name was a nested loop: 1.4 s for 50
# names over 200,000 rows (evidence in the commit); this is one scan.
LAST_ACTIONS_ON = sa.text(
    "SELECT DISTINCT ON (x.named) x.named, x.id, x.at, x.actor_ref, x.action, x.target, x.note FROM ("
    "  SELECT CASE WHEN CAST(:p AS boolean) THEN split_part(a.target, ' ', 1) || ' ' || split_part(a.target, ' ', 2) "
    "  ELSE a.target END AS named, a.id, a.at, a.actor_ref, a.action, a.target, a.note "
    "  FROM operator_actions a WHERE a.tenant_id = :t) x "
    "WHERE x.named = ANY(CAST(:gs AS text[])) ORDER BY x.named, x.id DESC")

# ---- listing and revoking keys -------------------------------------------------------------------------------
# LIST_KEYS: API keys with who made and who revoked each, one tenant's or every tenant's.
# tenant NULL: every tenant's (the command line, run by whoever holds the database).
LIST_KEYS = sa.text("""
SELECT k.id, k.tenant_id, t.name AS tenant_name, k.prefix, k.actor_ref, k.created_at, k.revoked_at,
       made.actor_ref AS created_by, gone.actor_ref AS revoked_by, gone.note AS revoke_note
FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
-- The audit rows written in the key's own transactions: now() is the transaction's start, so each has the key's
-- own timestamp (the prefix alone could name two keys).
LEFT JOIN LATERAL (SELECT a.actor_ref FROM operator_actions a WHERE a.tenant_id = k.tenant_id
                   AND a.action = 'create API key' AND a.at = k.created_at
                   AND a.target = 'key ' || k.prefix || '… acting as ' || k.actor_ref
                   ORDER BY a.id LIMIT 1) made ON true
LEFT JOIN LATERAL (SELECT a.actor_ref, a.note FROM operator_actions a WHERE a.tenant_id = k.tenant_id
                   AND a.action = 'revoke API key' AND a.at = k.revoked_at
                   AND a.target = 'key ' || k.prefix || '… acting as ' || k.actor_ref
                   ORDER BY a.id LIMIT 1) gone ON true
WHERE CAST(:t AS integer) IS NULL OR k.tenant_id = :t
ORDER BY k.revoked_at IS NOT NULL, k.id DESC
LIMIT :l""")
# REVOKE_KEY: an API key revoked, if it is live (and the tenant's, when a tenant is given).
REVOKE_KEY = sa.text("""
UPDATE api_keys SET revoked_at = now()
WHERE id = :id AND (CAST(:t AS integer) IS NULL OR tenant_id = :t) AND revoked_at IS NULL
RETURNING id, tenant_id, prefix, actor_ref, revoked_at""")
# ONE_KEY: one API key by id (the tenant's, when a tenant is given).
ONE_KEY = sa.text("SELECT id, tenant_id, prefix, actor_ref, revoked_at FROM api_keys "
                  "WHERE id = :id AND (CAST(:t AS integer) IS NULL OR tenant_id = :t)")

# ---- Idempotency-Key claims ----------------------------------------------------------------------------------
# CLAIM_KEY: an Idempotency-Key claimed for one request, unless a live row holds it.
# Claim the key unless a live row holds it: an expired row, or an unfinished one past its hold, is taken over.
CLAIM_KEY = sa.text("""
INSERT INTO idempotency_keys AS k (tenant_id, key, request_digest, method, path, locked_until, expires_at)
VALUES (:t, :k, :d, :m, :p, :hold, :exp)
ON CONFLICT (tenant_id, key) DO UPDATE SET
  request_digest = EXCLUDED.request_digest, method = EXCLUDED.method, path = EXCLUDED.path, status = NULL,
  content_type = NULL, response_body = NULL, created_at = now(), locked_until = EXCLUDED.locked_until,
  expires_at = EXCLUDED.expires_at
WHERE k.expires_at <= :now OR (k.status IS NULL AND k.locked_until <= :now)
RETURNING true""")
# READ_KEY: an Idempotency-Key's request digest and its kept answer.
READ_KEY = sa.text("SELECT request_digest, status, content_type, response_body FROM idempotency_keys "
                   "WHERE tenant_id = :t AND key = :k")
# FINISH_KEY: the first answer kept on the Idempotency-Key this request claimed.
FINISH_KEY = sa.text("UPDATE idempotency_keys SET status = :s, content_type = :c, response_body = :b "
                     "WHERE tenant_id = :t AND key = :k AND request_digest = :d AND status IS NULL")
# RELEASE_KEY: an unfinished Idempotency-Key given up by the request that claimed it.
RELEASE_KEY = sa.text("DELETE FROM idempotency_keys WHERE tenant_id = :t AND key = :k AND request_digest = :d "
                      "AND status IS NULL")
# PURGE_KEYS: up to 100 expired Idempotency-Keys deleted.
# Expired keys are removed a few at a time by the requests that claim new ones (the expiry index keeps it cheap).
PURGE_KEYS = sa.text("DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys "
                     "WHERE expires_at <= :now LIMIT 100)")

# ---- the dashboard's cookie sessions -------------------------------------------------------------------------
# INSERT_SESSION: a dashboard login ticket or session, by its token's hash.
# A ticket (`:th` NULL) or a session, which keeps the hash of the ticket spent for it (`bought_with`).
INSERT_SESSION = sa.text(
    "INSERT INTO operator_sessions (token_hash, operator_id, kind, created_at, expires_at, ticket_hash) "
    "VALUES (:h, :o, :kind, :now, :exp, :th)")
# SPEND_TICKET: a live login ticket spent once, answering its operator.
SPEND_TICKET = sa.text(
    "UPDATE operator_sessions SET ended_at = :now WHERE token_hash = :h AND kind = 'ticket' "
    "AND ended_at IS NULL AND expires_at > :now RETURNING operator_id")
# END_PREVIOUS_SESSION: the session a browser held before ended.
END_PREVIOUS_SESSION = sa.text("UPDATE operator_sessions SET ended_at = :now WHERE token_hash = :h "
                               "AND kind = 'session' AND ended_at IS NULL")
# LIVE_SESSION: the operator of a live session, by the session token's hash.
LIVE_SESSION = sa.text(
    "SELECT o.id, o.tenant_id, o.login, o.display_name, o.role, "
    "(SELECT t.name FROM tenants t WHERE t.id = o.tenant_id) AS tenant_name FROM operator_sessions s "
    "JOIN operators o ON o.id = s.operator_id WHERE s.token_hash = :h AND s.kind = 'session' "
    "AND s.ended_at IS NULL AND s.expires_at > :now")
# SESSION_BOUGHT_WITH: the live session a ticket was spent for, with its operator.
SESSION_BOUGHT_WITH = sa.text(
    "SELECT s.token_hash, o.id, o.tenant_id, o.login, o.display_name, o.role, "
    "(SELECT t.name FROM tenants t WHERE t.id = o.tenant_id) AS tenant_name FROM operator_sessions s "
    "JOIN operators o ON o.id = s.operator_id WHERE s.ticket_hash = :t AND s.kind = 'session' "
    "AND s.ended_at IS NULL AND s.expires_at > :now")
# END_SESSION: a session ended (logout).
END_SESSION = sa.text("UPDATE operator_sessions SET ended_at = :now WHERE token_hash = :h AND ended_at IS NULL")

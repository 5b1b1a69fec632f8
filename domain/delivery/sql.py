"""Delivery's named SQL, in one place: the claim, the take and the record of the hot path.

Each is ONE statement (a CTE), written once with `:name` parameters: the sync store (claims.py, SQLAlchemy) runs it
as `sa.text`, the workers' async store (hot.py, psycopg's pool, prepared) runs the same text through `for_psycopg`.

- `CLAIM`: the guarded lease and the next fence token (FOR UPDATE of the row, taken by the UPDATE; a row another
  claim holds is skipped by the guard, not waited on for long), and everything the decision and the send need:
  envelope, order status, intent and lead, campaign, the recipient's floor rules and contact point, their cap
  counts around today, the newest template for the channel and a one-time code's nonce.
- `TAKE`: for a message that may go: its cap slot (guarded: at the cap it takes nothing), the template version kept
  on the row, and its price (guarded: `balance >= price` or nothing; money only once the slot is taken). Mirrors
  domain/ledger/metering.py's `take_cap_slot` and `_RESERVE` (same rows, same entries, same lock order: the row,
  its cap counter, then the balance, taken last and committed right after).
- `RECORD_SENT`: an accepted send of a row still owed under the identity we sent, where nothing else is owed to
  the ledger (its cap slot held or not needed, its price held or free): SENT (DELIVERED for a webhook), the next
  token (fencing out any later claim), the nudge marked sent, the attempt line. Anything else (a late truth, a
  stale identity) matches nothing and goes the long way (domain/ledger/write.py's `accept_truth`).
- `RECORD_RETRY`: the guarded retry and its attempt line (with the retry's time); a stale token matches nothing.
- `PENDING_RECEIPTS`: run AFTER a record statement, in its own snapshot (a receipt committed while the record
  waited for the row's lock is seen): any receipt kept while the row was owed sends the record the long way.
"""

from __future__ import annotations

import re
from typing import Final

CLAIM: Final[str] = """
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
       cp.status AS campaign_status,
       r.id IS NOT NULL AS rcp_found, r.timezone AS rcp_timezone, r.quiet_start AS rcp_quiet_start,
       r.quiet_end AS rcp_quiet_end, r.daily_cap AS rcp_daily_cap, r.opted_out_channels AS rcp_opted_out,
       r.email AS rcp_email, r.phone AS rcp_phone,
       (SELECT json_object_agg(dc.day, dc.taken) FROM recipient_daily_counts dc
         WHERE r.id IS NOT NULL AND dc.tenant_id = c.tenant_id AND dc.recipient = c.recipient
           AND dc.day BETWEEN CAST(:day_from AS date) AND CAST(:day_to AS date)) AS taken_by_day,
       t.version AS template_version, t.body AS template_body, oc.nonce AS otp_nonce
FROM c
LEFT JOIN outbox_events e ON e.event_id = c.event_id
LEFT JOIN orders o ON o.tenant_id = c.tenant_id AND o.id = c.order_id
LEFT JOIN lead_notification_intents i ON i.id = c.intent_id
LEFT JOIN leads ld ON ld.id = i.lead_id
LEFT JOIN campaigns cp ON cp.id = c.campaign_id
LEFT JOIN recipients r ON c.channel <> 'webhook' AND r.tenant_id = c.tenant_id AND r.ref = c.recipient
LEFT JOIN LATERAL (SELECT version, body FROM templates
                   WHERE name = c.template AND c.channel = ANY(channels) ORDER BY version DESC LIMIT 1) t
       ON c.channel <> 'webhook'
LEFT JOIN otp_codes oc ON c.template = :otp_template AND oc.notification_id = c.id
"""

TAKE: Final[str] = """
WITH slot AS (
  INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken)
  SELECT CAST(:t AS int), CAST(:r AS text), CAST(:day AS date), 1 WHERE CAST(:day AS date) IS NOT NULL
  ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1
  WHERE recipient_daily_counts.taken < :cap
  RETURNING taken
), ok AS (
  SELECT CAST(:day AS date) IS NULL OR EXISTS (SELECT 1 FROM slot) AS slot_ok
), b AS (
  UPDATE balances SET balance_cents = balance_cents - :c
  WHERE tenant_id = :t AND balance_cents >= :c AND :c > 0 AND (SELECT slot_ok FROM ok)
  RETURNING tenant_id
), e AS (
  INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason)
  SELECT tenant_id, CAST(:n AS bigint), 'reserve', -CAST(:c AS int), CAST(:reason AS text) FROM b
), u AS (
  UPDATE notifications
  SET cap_day = CASE WHEN EXISTS (SELECT 1 FROM slot) THEN CAST(:day AS date) ELSE cap_day END,
      template_version = CASE WHEN (SELECT slot_ok FROM ok) THEN coalesce(CAST(:v AS int), template_version)
                              ELSE template_version END,
      reserved_cents = CASE WHEN EXISTS (SELECT 1 FROM b) THEN :c ELSE reserved_cents END
  WHERE id = :n
)
SELECT (SELECT slot_ok FROM ok) AS slot_ok, (:c <= 0 OR EXISTS (SELECT 1 FROM b)) AS paid
"""

RECORD_SENT: Final[str] = """
WITH n AS (
  UPDATE notifications SET status = CAST(:final AS text), provider_reference = coalesce(CAST(:p AS text), provider_reference),
         sent_at = coalesce(sent_at, now()),
         settled_at = CASE WHEN CAST(:final AS text) = 'DELIVERED' THEN now() END,
         leased_until = NULL, last_error_class = NULL, suppressed_reason = NULL, review = NULL,
         reason_detail = NULL, claim_token = claim_token + 1
  WHERE id = :id AND status = 'QUEUED' AND coalesce(provider_key, dedupe_key) = :key
    AND (reserved_cents > 0 OR cost_cents <= 0)
    AND (cap_day IS NOT NULL OR channel = 'webhook' OR lane = 'critical'
         OR NOT EXISTS (SELECT 1 FROM recipients r WHERE r.tenant_id = notifications.tenant_id
                        AND r.ref = notifications.recipient AND r.daily_cap IS NOT NULL))
  RETURNING id, intent_id
), i AS (
  UPDATE lead_notification_intents SET status = 'sent', updated_at = now(),
         final_reason = 'sent at ' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC'
  WHERE id = (SELECT intent_id FROM n) AND status IN ('pending', 'scheduled')
), a AS (
  INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome,
                                     status_code, error_class, latency_ms, response_excerpt)
  SELECT id, CAST(:no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(),
         CAST(:outcome AS text), CAST(:code AS int), NULL, CAST(:latency AS float8), CAST(:excerpt AS text) FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) AS matched FROM n
"""

RECORD_RETRY: Final[str] = """
WITH n AS (
  UPDATE notifications SET next_attempt_at = now() + make_interval(secs => :delay), leased_until = NULL,
         last_error_class = :err
  WHERE id = :id AND status = 'QUEUED' AND claim_token = :tok
  RETURNING id, next_attempt_at
), a AS (
  INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome,
                                     status_code, error_class, latency_ms, response_excerpt, next_attempt_at)
  SELECT id, CAST(:no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(), 'retry',
         CAST(:code AS int), CAST(:err AS text), CAST(:latency AS float8), CAST(:excerpt AS text),
         next_attempt_at FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) AS matched FROM n
"""

PENDING_RECEIPTS: Final[str] = (
    "SELECT EXISTS (SELECT 1 FROM delivery_receipts WHERE notification_id = :id AND applied_at IS NULL) AS pending")

CHANNEL_OF: Final[str] = "SELECT channel FROM notifications WHERE id = :id AND status = 'QUEUED'"

_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)\b")


def for_psycopg(sql: str) -> str:
    """The same statement with psycopg's `%(name)s` placeholders (the text holds no literal `%` or `::` cast)."""
    assert "%" not in sql and "::" not in sql, "escape or avoid % and :: in delivery SQL"
    return _PARAM.sub(r"%(\1)s", sql)

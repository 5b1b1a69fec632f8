"""Delivery's named SQL for the record of an attempt, and the provider receipts that settle a sent message.

- `RECORD_SENT`: an accepted send of a row still owed under the identity we sent, where nothing else is owed to
  the ledger (its cap slot held or not needed, its price held or free): SENT (DELIVERED for a webhook), the next
  token (fencing out any later claim), the nudge marked sent, the attempt line. Anything else (a late truth, a
  stale identity) matches nothing and goes the long way (domain/ledger/write.py's `accept_truth`).
- `RECORD_RETRY`: the guarded retry and its attempt line (with the retry's time); a stale token matches nothing,
  and so does a one-time code's retry that would come due at or after the code's end of life: the long way settles
  that row `code_expired` instead (`CODE_OUTLIVED`), so a code's retries never outlive it.
- `PENDING_RECEIPTS`: run AFTER a record statement, in its own snapshot (a receipt committed while the record
  waited for the row's lock is seen): any receipt kept while the row was owed sends the record the long way.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from domain.delivery.sql import Statement

# The record's pieces, shared by the one-row statements and their batch forms (`{x}`: where a row's value comes
# from: a parameter `:x` for one row, the batch's unnested column `v.x` for many).
_SENT_SET = """status = CAST({final} AS text),
         provider_reference = coalesce(CAST({reference} AS text), provider_reference),
         sent_at = coalesce(sent_at, now()),
         settled_at = CASE WHEN CAST({final} AS text) = 'DELIVERED' THEN now() END,
         leased_until = NULL, last_error_class = NULL, suppressed_reason = NULL, review = NULL,
         reason_detail = NULL, claim_token = claim_token + 1"""
_SENT_GUARD = """status = 'QUEUED' AND coalesce(provider_key, dedupe_key) = {key}
    AND (reserved_cents > 0 OR cost_cents <= 0)
    AND (cap_day IS NOT NULL OR channel = 'webhook' OR lane = 'critical'
         OR NOT EXISTS (SELECT 1 FROM recipients r WHERE r.tenant_id = notifications.tenant_id
                        AND r.ref = notifications.recipient AND r.daily_cap IS NOT NULL))"""
_INTENT_SENT = """UPDATE lead_notification_intents SET status = 'sent', updated_at = now(),
         final_reason = 'sent at ' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC'"""
_ATTEMPT_COLUMNS = """notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome,
                                     status_code, error_class, latency_ms, response_excerpt, next_attempt_at,
                                     notification_created_at)"""
_RETRY_SET = """next_attempt_at = now() + make_interval(secs => {delay}), leased_until = NULL,
         last_error_class = {error_class}"""
# `leased_until IS NOT NULL`: the claim's retry is recorded once. The same record made again (the store's second try
# after a COMMIT that landed but whose answer the connection lost) matches nothing, and a tenant endpoint's failure
# is counted once by its breaker, not twice. A lease that ran out is still a lease: a stalled worker whose row no
# one claimed since records its retry.
_RETRY_GUARD = """status = 'QUEUED' AND claim_token = {claim_token} AND leased_until IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM otp_codes oc WHERE oc.notification_id = notifications.id
                    AND oc.expires_at <= now() + make_interval(secs => {delay}))"""

# RECORD_SENT: an accepted send recorded on a row still owed under the identity sent, with its attempt line.
RECORD_SENT: Final = Statement(f"""
WITH n AS (
  UPDATE notifications SET {_SENT_SET.format(final=":final", reference=":provider_reference")}
  WHERE id = :id AND created_at = CAST(:created_at AS timestamptz) AND {_SENT_GUARD.format(key=":key")}
  RETURNING id, intent_id, created_at
), i AS (
  {_INTENT_SENT}
  WHERE id = (SELECT intent_id FROM n) AND status IN ('pending', 'scheduled')
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT id, CAST(:attempt_no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(),
         CAST(:outcome AS text), CAST(:code AS int), NULL, CAST(:latency AS float8), CAST(:excerpt AS text), NULL,
         created_at FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) AS matched FROM n
""")

# RECORD_RETRY: a retry scheduled on a row still ours, with its attempt line.
RECORD_RETRY: Final = Statement(f"""
WITH n AS (
  UPDATE notifications SET {_RETRY_SET.format(delay=":delay", error_class=":error_class")}
  WHERE id = :id AND created_at = CAST(:created_at AS timestamptz)
    AND {_RETRY_GUARD.format(claim_token=":claim_token", delay=":delay")}
  RETURNING id, next_attempt_at, created_at
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT id, CAST(:attempt_no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(), 'retry',
         CAST(:code AS int), CAST(:error_class AS text), CAST(:latency AS float8), CAST(:excerpt AS text),
         next_attempt_at, created_at FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) AS matched FROM n
""")

# RECORD_SENT_BATCH: `RECORD_SENT` for every accepted send of a batch, answering the ids it matched.
# The batch forms (a batched lane's drain loop, domain/delivery/store_batch.py `record_batch`): one statement for every
# accepted send of a batch, one for every retry, each row under exactly the guards of its one-row statement
# above, its values unnested from arrays (one element per row, in the same order). RETURNING the ids matched:
# a row that matched nothing (a stale token, a late truth) goes the long way, in the same transaction.
RECORD_SENT_BATCH: Final = Statement(f"""
WITH v AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:finals AS text[]), CAST(:provider_references AS text[]),
                       CAST(:keys AS text[]), CAST(:attempt_nos AS int[]), CAST(:starteds AS timestamptz[]),
                       CAST(:outcomes AS text[]), CAST(:codes AS int[]), CAST(:latencies AS float8[]),
                       CAST(:excerpts AS text[]), CAST(:created_ats AS timestamptz[]))
    AS v(vid, vfinal, vp, vkey, vno, vstarted, voutcome, vcode, vlatency, vexcerpt, vca)
), n AS (
  UPDATE notifications SET {_SENT_SET.format(final="v.vfinal", reference="v.vp")}
  FROM v WHERE notifications.id = v.vid AND notifications.created_at = v.vca
    AND notifications.created_at = ANY(CAST(:created_ats AS timestamptz[])) AND {_SENT_GUARD.format(key="v.vkey")}
  RETURNING notifications.id, notifications.intent_id, notifications.created_at
), i AS (
  {_INTENT_SENT}
  WHERE id IN (SELECT intent_id FROM n WHERE intent_id IS NOT NULL) AND status IN ('pending', 'scheduled')
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT n.id, v.vno, CAST(:worker AS text), v.vstarted, now(), v.voutcome, v.vcode, NULL, v.vlatency, v.vexcerpt,
         NULL, n.created_at
  FROM n JOIN v ON v.vid = n.id
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT id FROM n
""")

# RECORD_RETRY_BATCH: `RECORD_RETRY` for every retry of a batch, answering the ids it matched.
RECORD_RETRY_BATCH: Final = Statement(f"""
WITH v AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:claim_tokens AS bigint[]), CAST(:delays AS float8[]),
                       CAST(:error_classes AS text[]), CAST(:attempt_nos AS int[]), CAST(:starteds AS timestamptz[]),
                       CAST(:codes AS int[]), CAST(:latencies AS float8[]), CAST(:excerpts AS text[]),
                       CAST(:created_ats AS timestamptz[]))
    AS v(vid, vtok, vdelay, verr, vno, vstarted, vcode, vlatency, vexcerpt, vca)
), n AS (
  UPDATE notifications SET {_RETRY_SET.format(delay="v.vdelay", error_class="v.verr")}
  FROM v WHERE notifications.id = v.vid AND notifications.created_at = v.vca
    AND notifications.created_at = ANY(CAST(:created_ats AS timestamptz[]))
    AND {_RETRY_GUARD.format(claim_token="v.vtok", delay="v.vdelay")}
  RETURNING notifications.id, notifications.next_attempt_at, notifications.created_at
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT n.id, v.vno, CAST(:worker AS text), v.vstarted, now(), 'retry', v.vcode, v.verr, v.vlatency, v.vexcerpt,
         n.next_attempt_at, n.created_at
  FROM n JOIN v ON v.vid = n.id
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT id FROM n
""")

# PENDING_RECEIPTS: whether a row has a receipt kept while it was owed.
PENDING_RECEIPTS: Final = Statement(
    "SELECT EXISTS (SELECT 1 FROM delivery_receipts WHERE notification_id = :id AND applied_at IS NULL) AS pending")
# PENDING_RECEIPTS_BATCH: the ids among :ids with a receipt kept while they were owed (run after the batch's records).
PENDING_RECEIPTS_BATCH: Final = Statement(
    "SELECT DISTINCT notification_id AS id FROM delivery_receipts "
    "WHERE notification_id = ANY(CAST(:ids AS bigint[])) AND applied_at IS NULL")

# ATTEMPT_LINE: one attempt line of a row, in the row's month (the long way's).
# The long way's attempt line (long_way.py): the same row as the records above, its partition key (the message's
# `created_at`) read from the message in the same statement.
ATTEMPT_LINE: Final = Statement("""
INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome, status_code,
                                   error_class, latency_ms, response_excerpt, next_attempt_at, notification_created_at)
SELECT n.id, CAST(:attempt_no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(),
       CAST(:outcome AS text), CAST(:code AS int), CAST(:error_class AS text), CAST(:latency AS float8),
       CAST(:excerpt AS text), CAST(:next_attempt_at AS timestamptz), n.created_at
FROM notifications n WHERE n.id = :id AND n.created_at = CAST(:created_at AS timestamptz)
ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
""")

# CODE_OUTLIVED: a one-time code's end of life, when its retry would come due at or after it.
# A retry `RECORD_RETRY` refused because the code's life ends before it would come due, under the claim's token.
CODE_OUTLIVED = sa.text(
    "SELECT oc.expires_at FROM otp_codes oc JOIN notifications n ON n.id = oc.notification_id "
    "WHERE oc.notification_id = :id AND n.status = 'QUEUED' AND n.claim_token = :claim_token "
    "AND oc.expires_at <= now() + make_interval(secs => :delay)")

# ---- receipts (receipts.py) -------------------------------------------------------------------------------------
# ROWS_FOR_RECEIPTS: a batch's rows, however each was found, locked by this one statement in id order.
# Two batches, or a batch and a worker's record, take their rows in one order and take turns, never deadlock; the
# lock makes a receipt and its row's record take turns. A receipt's row is found (in the statement's snapshot,
# before the lock) by the provider's reference, else by the key we sent while the reference is not on the row (the
# send not recorded yet): the replay's own key when there is one (an old receipt never lands on a replayed
# message), the dedupe key through `ledger_keys` (the ledger is partitioned; its key kept once there) — each by an
# index, as the one-receipt statements below. Each row answers the places in the batch (1-based) of the receipts
# found on it by reference and by key, and what it says once locked (its reference and key: receipts.py takes, for
# each receipt, the newest row found by its reference, else by its key, and checks it still matches, a row changed
# between being found and being locked being rare).
# ROWS_BY_REFERENCES: the common case of `ROWS_FOR_RECEIPTS`, a batch whose every receipt names a recorded send.
# The same answer (each row with the batch's places that found it), by the reference index of one table and locked
# in id order — a statement a fraction as costly to plan; when a receipt's row is not among them, `receipts.py`
# runs `ROWS_FOR_RECEIPTS` in the same transaction.
ROWS_BY_REFERENCES = sa.text(
    """
    SELECT n.id, n.status, n.tenant_id, n.order_id, n.provider_reference,
           coalesce(n.provider_key, n.dedupe_key) AS current_key,
           ARRAY(SELECT v.ord FROM unnest(CAST(:references AS text[])) WITH ORDINALITY AS v(ref, ord)
                 WHERE v.ref = n.provider_reference) AS by_reference,
           CAST(ARRAY[] AS bigint[]) AS by_key
    FROM notifications n
    WHERE n.provider_reference = ANY(CAST(:references AS text[])) AND n.channel = :provider
    ORDER BY n.id FOR UPDATE
    """)
ROWS_FOR_RECEIPTS = sa.text(
    """
    WITH v AS (
      SELECT * FROM unnest(CAST(:references AS text[]), CAST(:keys AS text[])) WITH ORDINALITY AS v(ref, key, ord)
    ), by_ref AS (
      SELECT v.ord, n.id FROM notifications n JOIN v ON v.ref = n.provider_reference
      WHERE n.provider_reference = ANY(CAST(:references AS text[])) AND n.channel = :provider
    ), unfound AS (
      SELECT ord, key FROM v WHERE key IS NOT NULL AND ord NOT IN (SELECT ord FROM by_ref)
    ), by_key AS (
      SELECT u.ord, n.id FROM notifications n
      JOIN ledger_keys k ON k.notification_id = n.id JOIN unfound u ON u.key = k.dedupe_key
      WHERE n.id = ANY(ARRAY(SELECT notification_id FROM ledger_keys WHERE dedupe_key IN (SELECT key FROM unfound)))
        AND n.provider_key IS NULL AND n.channel = :provider
      UNION ALL
      SELECT u.ord, n.id FROM notifications n JOIN unfound u ON u.key = n.provider_key
      WHERE n.provider_key = ANY(ARRAY(SELECT key FROM unfound)) AND n.channel = :provider
    )
    SELECT n.id, n.status, n.tenant_id, n.order_id, n.provider_reference,
           coalesce(n.provider_key, n.dedupe_key) AS current_key,
           ARRAY(SELECT ord FROM by_ref WHERE by_ref.id = n.id) AS by_reference,
           ARRAY(SELECT ord FROM by_key WHERE by_key.id = n.id) AS by_key
    FROM notifications n
    WHERE n.id = ANY(ARRAY(SELECT id FROM by_ref UNION SELECT id FROM by_key)) AND n.channel = :provider
    ORDER BY n.id FOR UPDATE OF n
    """)
# BY_REFERENCE, BY_KEY: one receipt's row, found and locked as it is found (the rare receipt whose row changed
# between the statement above finding it and locking it): by the reference, else by the key.
_ROW = ("SELECT id, status, tenant_id, order_id, provider_reference, coalesce(provider_key, dedupe_key) AS current_key "
        "FROM notifications WHERE {where} AND channel = :provider ORDER BY id DESC LIMIT 1 FOR UPDATE")
BY_REFERENCE = sa.text(_ROW.format(where="provider_reference = :reference"))
BY_KEY = sa.text(_ROW.format(
    where="((provider_key IS NULL AND id = ANY(ARRAY(SELECT notification_id FROM ledger_keys WHERE dedupe_key = :key)))"
          " OR provider_key = :key)"))
# KEEP: a batch's receipts kept, each receipt id once, answering those that are new.
# A receipt id once, in any month: its key first (unpartitioned), the receipt only if the key is new. Their ids
# follow the batch's order (ORDER BY its ordinality: a join's order is the plan's), the order `settle_receipts`
# settles them in.
KEEP = sa.text(
    "WITH v AS (SELECT * FROM unnest(CAST(:receipt_ids AS text[]), CAST(:references AS text[]), "
    "                                CAST(:outcomes AS text[]), CAST(:notification_ids AS bigint[])) WITH ORDINALITY "
    "           AS v(receipt_id, reference, outcome, notification_id, ord)), "
    "k AS (INSERT INTO delivery_receipt_keys (receipt_id, received_at) SELECT receipt_id, now() FROM v ORDER BY ord "
    "      ON CONFLICT (receipt_id) DO NOTHING RETURNING receipt_id, received_at) "
    "INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome, notification_id, received_at) "
    "SELECT k.receipt_id, CAST(:provider AS text), v.reference, v.outcome, v.notification_id, k.received_at "
    "FROM k JOIN v ON v.receipt_id = k.receipt_id ORDER BY v.ord "
    "RETURNING id, receipt_id")

"""Delivery's named SQL, in one place: the claim, the take and the record of the hot path.

Each is ONE statement (a CTE), written once with `:name` parameters: the sync store (claims.py, SQLAlchemy) runs it
as `sa.text`, the workers' async store (hot.py, psycopg's pool, prepared) runs the same text through `for_psycopg`.

- `CLAIM`: the guarded lease and the next fence token (FOR UPDATE of the row, taken by the UPDATE; a row another
  claim holds is skipped by the guard, not waited on for long), and everything the decision and the send need:
  envelope, order status, intent and lead, campaign, the recipient's floor rules and contact point, their cap
  counts around today, the newest template for the channel and a one-time code's nonce and end of life (the floor
  suppresses a code claimed after it: `code_expired`); for a tenant endpoint's
  webhook, whether the endpoint is still there, enabled, and its breaker closed (never its URL or secrets).
- `TAKE`: for a message that may go: its cap slot (guarded: at the cap it takes nothing), the template version kept
  on the row, and its price (guarded: `balance >= price` or nothing; money only once the slot is taken). Mirrors
  domain/ledger/metering.py's `take_cap_slot` and `_RESERVE` (same rows, same entries, same lock order: the row,
  its cap counter, then the balance, taken last and committed right after).
- `RECORD_SENT`: an accepted send of a row still owed under the identity we sent, where nothing else is owed to
  the ledger (its cap slot held or not needed, its price held or free): SENT (DELIVERED for a webhook), the next
  token (fencing out any later claim), the nudge marked sent, the attempt line. Anything else (a late truth, a
  stale identity) matches nothing and goes the long way (domain/ledger/write.py's `accept_truth`).
- `RECORD_RETRY`: the guarded retry and its attempt line (with the retry's time); a stale token matches nothing,
  and so does a one-time code's retry that would come due at or after the code's end of life: the long way settles
  that row `code_expired` instead (`CODE_OUTLIVED`), so a code's retries never outlive it.
- `PENDING_RECEIPTS`: run AFTER a record statement, in its own snapshot (a receipt committed while the record
  waited for the row's lock is seen): any receipt kept while the row was owed sends the record the long way.

The rest of delivery's statements follow `for_psycopg`, as `sa.text` for the sync store: the long way of the claim
(claims.py), receipts (receipts.py), lanes and review, the relay's scan (wakeups.py), what holds an owed row
(state.py), /ops and /metrics (views.py, telemetry.py).
"""

from __future__ import annotations

import re
from typing import Final

import sqlalchemy as sa

from domain.ledger.views import NOTIFICATION_COLUMNS
from domain.vocabulary import lanes_sql_list

# The claim's pieces, shared by `CLAIM` (one row by id) and `CLAIM_BATCH` (up to :n due rows of one lane).
_CLAIM_SET = """UPDATE notifications SET attempts = attempts + 1, leased_until = now() + make_interval(secs => :lease),
                           claimed_at = now(), claim_token = claim_token + 1"""
# Owed, not leased (or its lease ran out: the worker that held it is gone or late; the token fences it out), its
# lane not paused. `{due}`: how due.
_CLAIMABLE = """status = 'QUEUED' AND {due}
    AND (leased_until IS NULL OR leased_until < now())
    AND NOT EXISTS (SELECT 1 FROM lane_controls l WHERE l.lane = notifications.lane AND l.paused)"""
_CLAIM_RETURNING = """RETURNING id, tenant_id, recipient, channel, lane, template, payload, dedupe_key, cost_cents,
            attempts,
            max_attempts, event_id, order_id, intent_id, campaign_id, reserved_cents, cap_day, claim_token,
            provider_key, endpoint_id, created_at"""
# In id order (a batch's takes go oldest first): an UPDATE's RETURNING has no order of its own, and on the
# partitioned ledger it follows the partitions, not the ids.
_CLAIM_JOINED = """
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
       t.version AS template_version, t.body AS template_body, oc.nonce AS otp_nonce,
       oc.expires_at AS otp_expires_at,
       we.id IS NOT NULL AS ep_found, we.disabled_at IS NOT NULL AS ep_disabled,
       we.disabled_reason AS ep_disabled_reason, we.breaker_open_until AS ep_open_until
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
LEFT JOIN webhook_endpoints we ON we.id = c.endpoint_id AND we.tenant_id = c.tenant_id
ORDER BY c.id
"""

CLAIM: Final[str] = f"""
WITH c AS (
  {_CLAIM_SET}
  WHERE id = :id AND {_CLAIMABLE.format(due="next_attempt_at <= now() + interval '1 second'")}
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}"""

# `CLAIM` of a row whose month its wake-up carries (the relay's scan read the row's `created_at`, the ledger's
# partition key, and the per-row job holds it): planned on that month's partition alone.
CLAIM_IN_MONTH: Final[str] = f"""
WITH c AS (
  {_CLAIM_SET}
  WHERE id = :id AND created_at = CAST(:ca AS timestamptz)
    AND {_CLAIMABLE.format(due="next_attempt_at <= now() + interval '1 second'")}
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}"""

# `CLAIM` for up to :n due rows of one lane at once (a batched lane's drain loop, jobs/batches.py): the oldest due
# first, each its own lease and next fence token; a row another claim (or the relay's scan) holds is skipped, not
# waited on (SKIP LOCKED), so two loops or two workers never claim one row. The pick is a MATERIALIZED CTE: it is
# evaluated once, whatever the plan of the UPDATE. Served by notifications_owed_by_lane_due (migration 0025).
CLAIM_BATCH: Final[str] = f"""
WITH picked AS MATERIALIZED (
  SELECT id, created_at FROM notifications
  WHERE lane = :lane AND {_CLAIMABLE.format(due="next_attempt_at <= now()")}
  ORDER BY next_attempt_at, id LIMIT :n FOR UPDATE SKIP LOCKED
), c AS (
  {_CLAIM_SET}
  WHERE (id, created_at) IN (SELECT id, created_at FROM picked)
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}"""

# The bulk lane's batch (a bulk drain loop, jobs/batches.py `deliver_bulk_batch`). First the lane's flows — every
# (tenant, campaign) with owed bulk rows, by the skip scan of `BULK_FLOWS` over notifications_owed_bulk_flow — with
# the tenant's own pace and the campaign's channel (NULL for a tenant's one-by-one bulk messages, campaign 0).
BULK_DUE_FLOWS: Final[str] = """
WITH RECURSIVE f AS (
  (SELECT tenant_id AS t, coalesce(campaign_id, 0) AS c FROM notifications
   WHERE status = 'QUEUED' AND lane = 'bulk' ORDER BY tenant_id, coalesce(campaign_id, 0) LIMIT 1)
  UNION ALL
  SELECT nx.t, nx.c FROM f CROSS JOIN LATERAL (
    SELECT tenant_id AS t, coalesce(campaign_id, 0) AS c FROM notifications
    WHERE status = 'QUEUED' AND lane = 'bulk' AND (tenant_id, coalesce(campaign_id, 0)) > (f.t, f.c)
    ORDER BY tenant_id, coalesce(campaign_id, 0) LIMIT 1) nx
)
SELECT f.t AS tenant_id, f.c AS campaign_id, tn.bulk_rate_per_second AS tenant_rate, cp.channel AS channel
FROM f LEFT JOIN tenants tn ON tn.id = f.t LEFT JOIN campaigns cp ON f.c <> 0 AND cp.id = f.c ORDER BY f.t, f.c
"""

# Then the claim: up to :n due rows, shared fairly between the flows given (:ft, :fc) — each flow's oldest due rows
# (by its index, SKIP LOCKED: two loops never wait on each other), ranked by start-time fair queueing within the
# batch (a row's virtual time: its rank in its flow × its tenant's flows in the batch, so tenants share a batch
# equally and a tenant's campaigns share its turn) — and never more rows of a channel than the tokens taken from
# that channel's bucket (:chs, :quotas), nor more of a capped tenant than its moments reserved (:capped, :capq).
# Each row its own lease and next fence token, exactly as `CLAIM_BATCH`; a cancelled campaign's row is claimed
# like any other and refused by `plan` (campaign_status), never sent.
CLAIM_BULK_BATCH: Final[str] = f"""
WITH cand AS (
  SELECT x.id, x.created_at, x.channel, f.t, f.c, row_number() OVER (PARTITION BY f.t, f.c ORDER BY x.id) AS rn
  FROM unnest(CAST(:ft AS int[]), CAST(:fc AS bigint[])) AS f(t, c)
  CROSS JOIN LATERAL (
    SELECT id, created_at, channel FROM notifications
    WHERE status = 'QUEUED' AND lane = 'bulk' AND tenant_id = f.t AND coalesce(campaign_id, 0) = f.c
      AND channel = ANY(CAST(:chs AS text[]))
      AND {_CLAIMABLE.format(due="next_attempt_at <= now()")}
    ORDER BY tenant_id, coalesce(campaign_id, 0), id LIMIT :n FOR UPDATE SKIP LOCKED) x
), ranked AS (
  SELECT id, created_at, channel, t, rn * count(*) FILTER (WHERE rn = 1) OVER (PARTITION BY t) AS vt FROM cand
), numbered AS (
  SELECT id, created_at, channel, t, vt, row_number() OVER (PARTITION BY channel ORDER BY vt, t, id) AS chn,
         row_number() OVER (PARTITION BY t ORDER BY vt, id) AS tn FROM ranked
), pick AS (
  SELECT p.id, p.created_at FROM numbered p
  JOIN unnest(CAST(:chs AS text[]), CAST(:quotas AS int[])) AS q(ch, quota) ON q.ch = p.channel
  LEFT JOIN unnest(CAST(:capped AS int[]), CAST(:capq AS int[])) AS k(t, quota) ON k.t = p.t
  WHERE p.chn <= q.quota AND (k.t IS NULL OR p.tn <= k.quota)
  ORDER BY p.vt, p.t, p.id LIMIT :n
), c AS (
  {_CLAIM_SET}
  WHERE (id, created_at) IN (SELECT id, created_at FROM pick)
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}"""

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
  WHERE id = :n AND created_at = CAST(:ca AS timestamptz)
)
SELECT (SELECT slot_ok FROM ok) AS slot_ok, (:c <= 0 OR EXISTS (SELECT 1 FROM b)) AS paid
"""

# `TAKE` for a claim that sends its COMMIT in the same round trip (the bulk lane's, domain/delivery/hot.py): the take
# holds the tenant's balance row, which the tenant's one-time codes take too, and a COMMIT that waits for a busy,
# niced bulk worker's next turn held it for tens of milliseconds. Refused (no cap slot, no money), it must abort its
# transaction itself: its answer fails (SQLSTATE 22P02, `TAKE_REFUSED`) and the COMMIT after it rolls back.
TAKE_REFUSED: Final[str] = "take refused"
TAKE_OR_ABORT: Final[str] = TAKE[: TAKE.rindex("SELECT (SELECT slot_ok")] + f"""SELECT CAST(
  CASE WHEN (SELECT slot_ok FROM ok) AND (:c <= 0 OR EXISTS (SELECT 1 FROM b)) THEN 'true'
       ELSE '{TAKE_REFUSED}: slot ' || CAST((SELECT slot_ok FROM ok) AS text) END AS boolean) AS taken
"""

# Every take of a bulk batch in one statement (`TAKE` set-based): each row's cap slot, then each tenant's money for
# its rows at once, the balance entries and the rows' held cents. All or nothing, and the COMMIT in the same round
# trip (like `TAKE_OR_ABORT`: a tenant's balance row, which its one-time codes take too, is held only while the
# server runs it): a slot or a balance refused fails it (`TAKE_REFUSED`), the whole claim rolls back, and the
# batch is claimed again row by row under savepoints (`CLAIM_BATCH`'s way). One row per (tenant, recipient, day).
TAKE_BATCH: Final[str] = f"""
WITH x AS (
  SELECT * FROM unnest(CAST(:ns AS bigint[]), CAST(:ts AS int[]), CAST(:rs AS text[]), CAST(:days AS date[]),
                       CAST(:caps AS int[]), CAST(:cs AS int[]), CAST(:vs AS int[]), CAST(:reasons AS text[]),
                       CAST(:cas AS timestamptz[]))
    AS x(n, t, r, day, cap, c, v, reason, ca)
), slot AS (
  INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken)
  SELECT t, r, day, 1 FROM x WHERE day IS NOT NULL
  ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1
  WHERE recipient_daily_counts.taken < (SELECT max(x2.cap) FROM x x2 WHERE x2.t = recipient_daily_counts.tenant_id
                                        AND x2.r = recipient_daily_counts.recipient
                                        AND x2.day = recipient_daily_counts.day)
  RETURNING tenant_id, recipient, day
), owe AS (
  SELECT t, sum(c) AS total FROM x WHERE c > 0 GROUP BY t
), b AS (
  UPDATE balances SET balance_cents = balance_cents - owe.total
  FROM owe WHERE balances.tenant_id = owe.t AND balances.balance_cents >= owe.total
  RETURNING balances.tenant_id
), e AS (
  INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason)
  SELECT x.t, x.n, 'reserve', -x.c, x.reason FROM x WHERE x.c > 0 AND x.t IN (SELECT tenant_id FROM b)
), u AS (
  UPDATE notifications
  SET cap_day = CASE WHEN x.day IS NOT NULL THEN x.day ELSE notifications.cap_day END,
      template_version = coalesce(x.v, notifications.template_version),
      reserved_cents = CASE WHEN x.c > 0 THEN x.c ELSE notifications.reserved_cents END
  FROM x WHERE notifications.id = x.n AND notifications.created_at = x.ca
    AND notifications.created_at = ANY(CAST(:cas AS timestamptz[]))
)
SELECT CAST(
  CASE WHEN (SELECT count(*) FROM slot) = (SELECT count(*) FROM x WHERE day IS NOT NULL)
        AND (SELECT count(*) FROM b) = (SELECT count(*) FROM owe) THEN 'true'
       ELSE '{TAKE_REFUSED}: batch' END AS boolean) AS taken
"""

# The record's pieces, shared by the one-row statements and their batch forms (`{x}`: where a row's value comes
# from: a parameter `:x` for one row, the batch's unnested column `v.x` for many).
_SENT_SET = """status = CAST({final} AS text), provider_reference = coalesce(CAST({p} AS text), provider_reference),
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
         last_error_class = {err}"""
_RETRY_GUARD = """status = 'QUEUED' AND claim_token = {tok}
    AND NOT EXISTS (SELECT 1 FROM otp_codes oc WHERE oc.notification_id = notifications.id
                    AND oc.expires_at <= now() + make_interval(secs => {delay}))"""

RECORD_SENT: Final[str] = f"""
WITH n AS (
  UPDATE notifications SET {_SENT_SET.format(final=":final", p=":p")}
  WHERE id = :id AND created_at = CAST(:ca AS timestamptz) AND {_SENT_GUARD.format(key=":key")}
  RETURNING id, intent_id, created_at
), i AS (
  {_INTENT_SENT}
  WHERE id = (SELECT intent_id FROM n) AND status IN ('pending', 'scheduled')
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT id, CAST(:no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(),
         CAST(:outcome AS text), CAST(:code AS int), NULL, CAST(:latency AS float8), CAST(:excerpt AS text), NULL,
         created_at FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) AS matched FROM n
"""

RECORD_RETRY: Final[str] = f"""
WITH n AS (
  UPDATE notifications SET {_RETRY_SET.format(delay=":delay", err=":err")}
  WHERE id = :id AND created_at = CAST(:ca AS timestamptz) AND {_RETRY_GUARD.format(tok=":tok", delay=":delay")}
  RETURNING id, next_attempt_at, created_at
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT id, CAST(:no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(), 'retry',
         CAST(:code AS int), CAST(:err AS text), CAST(:latency AS float8), CAST(:excerpt AS text),
         next_attempt_at, created_at FROM n
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT count(*) AS matched FROM n
"""

# The batch forms (a batched lane's drain loop, domain/delivery/hot.py `record_batch`): one statement for every
# accepted send of a batch, one for every retry, each row under exactly the guards of its one-row statement
# above, its values unnested from arrays (one element per row, in the same order). RETURNING the ids matched:
# a row that matched nothing (a stale token, a late truth) goes the long way, alone.
RECORD_SENT_BATCH: Final[str] = f"""
WITH v AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:finals AS text[]), CAST(:ps AS text[]), CAST(:keys AS text[]),
                       CAST(:nos AS int[]), CAST(:starteds AS timestamptz[]), CAST(:outcomes AS text[]),
                       CAST(:codes AS int[]), CAST(:latencies AS float8[]), CAST(:excerpts AS text[]),
                       CAST(:cas AS timestamptz[]))
    AS v(vid, vfinal, vp, vkey, vno, vstarted, voutcome, vcode, vlatency, vexcerpt, vca)
), n AS (
  UPDATE notifications SET {_SENT_SET.format(final="v.vfinal", p="v.vp")}
  FROM v WHERE notifications.id = v.vid AND notifications.created_at = v.vca
    AND notifications.created_at = ANY(CAST(:cas AS timestamptz[])) AND {_SENT_GUARD.format(key="v.vkey")}
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
"""

RECORD_RETRY_BATCH: Final[str] = f"""
WITH v AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:toks AS bigint[]), CAST(:delays AS float8[]),
                       CAST(:errs AS text[]), CAST(:nos AS int[]), CAST(:starteds AS timestamptz[]),
                       CAST(:codes AS int[]), CAST(:latencies AS float8[]), CAST(:excerpts AS text[]),
                       CAST(:cas AS timestamptz[]))
    AS v(vid, vtok, vdelay, verr, vno, vstarted, vcode, vlatency, vexcerpt, vca)
), n AS (
  UPDATE notifications SET {_RETRY_SET.format(delay="v.vdelay", err="v.verr")}
  FROM v WHERE notifications.id = v.vid AND notifications.created_at = v.vca
    AND notifications.created_at = ANY(CAST(:cas AS timestamptz[]))
    AND {_RETRY_GUARD.format(tok="v.vtok", delay="v.vdelay")}
  RETURNING notifications.id, notifications.next_attempt_at, notifications.created_at
), a AS (
  INSERT INTO {_ATTEMPT_COLUMNS}
  SELECT n.id, v.vno, CAST(:worker AS text), v.vstarted, now(), 'retry', v.vcode, v.verr, v.vlatency, v.vexcerpt,
         n.next_attempt_at, n.created_at
  FROM n JOIN v ON v.vid = n.id
  ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
)
SELECT id FROM n
"""

PENDING_RECEIPTS: Final[str] = (
    "SELECT EXISTS (SELECT 1 FROM delivery_receipts WHERE notification_id = :id AND applied_at IS NULL) AS pending")
# The batch form: the ids among :ids with a receipt kept while they were owed (run after the batch's records).
PENDING_RECEIPTS_BATCH: Final[str] = (
    "SELECT DISTINCT notification_id AS id FROM delivery_receipts "
    "WHERE notification_id = ANY(CAST(:ids AS bigint[])) AND applied_at IS NULL")

# The long way's attempt line (claims.py): the same row as the records above, its partition key (the message's
# `created_at`) read from the message in the same statement.
ATTEMPT_LINE: Final[str] = """
INSERT INTO notification_attempts (notification_id, attempt_no, worker, started_at, finished_at, outcome, status_code,
                                   error_class, latency_ms, response_excerpt, next_attempt_at, notification_created_at)
SELECT n.id, CAST(:no AS int), CAST(:worker AS text), CAST(:started AS timestamptz), now(), CAST(:outcome AS text),
       CAST(:code AS int), CAST(:err AS text), CAST(:latency AS float8), CAST(:excerpt AS text),
       CAST(:next AS timestamptz), n.created_at
FROM notifications n WHERE n.id = :id AND n.created_at = CAST(:ca AS timestamptz)
ON CONFLICT ON CONSTRAINT notification_attempts_once DO NOTHING
"""

# Why `CLAIM` matched nothing, read just after it: the lane is paused now, or the row is still claimable with the
# lane running (resumed between the claim and this read: claim again), or neither (done, leased, not yet due).
UNCLAIMED: Final[str] = """
SELECT EXISTS (SELECT 1 FROM lane_controls l WHERE l.lane = :lane AND l.paused) AS paused,
       EXISTS (SELECT 1 FROM notifications WHERE id = :id AND status = 'QUEUED'
               AND next_attempt_at <= now() + interval '1 second'
               AND (leased_until IS NULL OR leased_until < now())) AS claimable"""

# When the next row of a lane comes due that no live lease holds (a retry's backoff, a deferral, a lease running
# out): a batched lane's idle loop sleeps until then instead of a whole idle poll. Served by
# notifications_owed_by_lane_due; the rows leased now (at most the lane's batches in flight) are stepped over, and
# a paused lane has nothing due (its loop waits out its poll).
# NULL when nothing is owed: `greatest(min(...), now())` ignored the NULL min of an empty lane and said "due now",
# so every idle batched worker's loop 0 claimed every NEXT_DUE_FLOOR_S (≈ 9 % of a core each, at rest). The
# caller takes a past due time as 0.
NEXT_DUE_IN_LANE: Final[str] = f"""
SELECT extract(epoch FROM min(next_attempt_at) - now()) AS due_in_s FROM (
  SELECT next_attempt_at FROM notifications
  WHERE lane = :lane AND {_CLAIMABLE.format(due="TRUE")}
  ORDER BY next_attempt_at, id LIMIT 1) n"""

# A bulk row's route before its claim: the channel's bucket, the tenant's (and its own pace, if it has one).
CHANNEL_OF: Final[str] = (
    "SELECT n.channel, n.tenant_id, t.bulk_rate_per_second AS tenant_rate FROM notifications n "
    "LEFT JOIN tenants t ON t.id = n.tenant_id WHERE n.id = :id AND n.status = 'QUEUED'")
# ... of a row whose month its wake-up carries (as `CLAIM_IN_MONTH`).
CHANNEL_OF_IN_MONTH: Final[str] = (
    "SELECT n.channel, n.tenant_id, t.bulk_rate_per_second AS tenant_rate FROM notifications n "
    "LEFT JOIN tenants t ON t.id = n.tenant_id "
    "WHERE n.id = :id AND n.created_at = CAST(:ca AS timestamptz) AND n.status = 'QUEUED'")

_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)\b")


def for_psycopg(sql: str) -> str:
    """The same statement with psycopg's `%(name)s` placeholders (the text holds no literal `%` or `::` cast)."""
    assert "%" not in sql and "::" not in sql, "escape or avoid % and :: in delivery SQL"
    return _PARAM.sub(r"%(\1)s", sql)


# ---- the long way of the claim (claims.py) --------------------------------------------------------------------
CLAIM_NOTIFICATION = sa.text(CLAIM)
CLAIM_NOTIFICATION_IN_MONTH = sa.text(CLAIM_IN_MONTH)
TAKE_STMT = sa.text(TAKE)
RECORD_SENT_STMT = sa.text(RECORD_SENT)
RECORD_RETRY_STMT = sa.text(RECORD_RETRY)
CHANNEL_OF_STMT = sa.text(CHANNEL_OF)
CHANNEL_OF_IN_MONTH_STMT = sa.text(CHANNEL_OF_IN_MONTH)
ATTEMPT_LINE_STMT = sa.text(ATTEMPT_LINE)
CAP_TAKEN = sa.text("SELECT taken FROM recipient_daily_counts WHERE tenant_id = :t AND recipient = :r AND day = :d")
OPT_OUT_CHANGE = sa.text(
    "SELECT ch.changed_at, ch.actor_ref FROM recipient_changes ch JOIN recipients r ON r.id = ch.recipient_id "
    "WHERE r.tenant_id = :t AND r.ref = :ref AND ch.field = 'opted_out_channels' "
    "AND ch.new_value LIKE :like ORDER BY ch.id DESC LIMIT 1")
# A retry `RECORD_RETRY` refused because the code's life ends before it would come due, under the claim's token.
CODE_OUTLIVED = sa.text(
    "SELECT oc.expires_at FROM otp_codes oc JOIN notifications n ON n.id = oc.notification_id "
    "WHERE oc.notification_id = :id AND n.status = 'QUEUED' AND n.claim_token = :tok "
    "AND oc.expires_at <= now() + make_interval(secs => :delay)")
DEFER = sa.text(
    "UPDATE notifications SET attempts = attempts - 1, next_attempt_at = :u, leased_until = NULL, "
    "reason_detail = :d WHERE id = :id AND created_at = CAST(:ca AS timestamptz) AND status = 'QUEUED' "
    "AND claim_token = :tok")
# A claim that must not run (its attempts were used up): its count given back before the row settles.
GIVE_BACK_ATTEMPT = sa.text(
    "UPDATE notifications SET attempts = attempts - 1 WHERE id = :id AND created_at = CAST(:ca AS timestamptz) "
    "AND status = 'QUEUED' AND claim_token = :tok")
GIVE_BACK = sa.text(
    "UPDATE notifications SET attempts = attempts - 1, leased_until = NULL, next_attempt_at = now() "
    "WHERE id = :id AND created_at = CAST(:ca AS timestamptz) AND status = 'QUEUED' AND claim_token = :tok "
    "RETURNING id")

# ---- receipts (receipts.py) -------------------------------------------------------------------------------------
_ROW = ("SELECT id, status, tenant_id, order_id, channel FROM notifications WHERE {where} AND channel = :p "
        "FOR UPDATE")
BY_REFERENCE = sa.text(_ROW.format(where="provider_reference = :r"))
# The key we sent: the replay's own key when there is one (an old receipt never lands on a replayed message).
# The dedupe key is found through `ledger_keys` (the ledger is partitioned; its key kept once there).
BY_KEY = sa.text(_ROW.format(
    where="((provider_key IS NULL AND id = ANY(ARRAY(SELECT notification_id FROM ledger_keys WHERE dedupe_key = :k)))"
          " OR provider_key = :k)"))
# A receipt id once, in any month: its key first (unpartitioned), the receipt only if the key is new.
KEEP = sa.text(
    "WITH k AS (INSERT INTO delivery_receipt_keys (receipt_id, received_at) VALUES (:i, now()) "
    "ON CONFLICT (receipt_id) DO NOTHING RETURNING receipt_id, received_at) "
    "INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome, notification_id, received_at) "
    "SELECT receipt_id, CAST(:p AS text), CAST(:r AS text), CAST(:o AS text), CAST(:n AS bigint), received_at FROM k "
    "RETURNING id")

# ---- lanes (lanes.py) and review (review.py) --------------------------------------------------------------------
LANE_PAUSED = sa.text("SELECT paused FROM lane_controls WHERE lane = :l")
SET_LANE_PAUSED = sa.text(
    "INSERT INTO lane_controls (lane, paused) VALUES (:l, :p) "
    "ON CONFLICT (lane) DO UPDATE SET paused = :p, updated_at = now()")
# `tenant_id` None = platform on-call, whose scope is every tenant; the action is recorded under the row's tenant.
_IN_SCOPE = "id = :id AND (CAST(:t AS integer) IS NULL OR tenant_id = :t) AND status = 'FAILED'"
_REPLAY_SET = (
    "UPDATE notifications SET status = 'QUEUED', review = NULL, next_attempt_at = now(), "
    "max_attempts = attempts + :m, settled_at = NULL, leased_until = NULL, replayed_at = now(), "
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
    "WHERE oc.expires_at <= now() AND n.status = 'FAILED' AND (CAST(:t AS integer) IS NULL OR n.tenant_id = :t) ")
REPLAY = sa.text(f"{_REPLAY_SET} WHERE {_IN_SCOPE} AND {_CODE_ALIVE} RETURNING lane, tenant_id")
# Shared with every replay, exclusive to an archive of a month (domain/retention/sql.py `ARCHIVE_EXCLUDES_REPLAY`).
REPLAY_WAITS_FOR_ARCHIVE = sa.text("SELECT pg_advisory_xact_lock_shared(hashtext('outbox archive'))")
RESOLVE = sa.text(f"UPDATE notifications SET review = 'resolved' WHERE {_IN_SCOPE} RETURNING id, tenant_id")
# Bulk review: the rows chosen by id, or every FAILED row of a lane that failed since :since and no human resolved.
# The status guard is the fence: a row replayed already (QUEUED again) or settled meanwhile matches nothing.
# FOR UPDATE SKIP LOCKED is not wanted here: a row locked by a concurrent replay is waited for, then re-checked.
_MANY = "id = ANY(:ids) AND (CAST(:t AS integer) IS NULL OR tenant_id = :t) AND status = 'FAILED'"
_LANE_FILTER = ("lane = :lane AND (CAST(:t AS integer) IS NULL OR tenant_id = :t) AND status = 'FAILED' "
                "AND coalesce(review, 'needs_review') <> 'resolved' AND coalesce(settled_at, created_at) >= :since")
_LANE_SINCE = f"status = 'FAILED' AND id IN (SELECT id FROM notifications WHERE {_LANE_FILTER} ORDER BY id LIMIT :l)"
_LANE_SINCE_ALIVE = (f"status = 'FAILED' AND id IN (SELECT id FROM notifications WHERE {_LANE_FILTER} "
                     f"AND {_CODE_ALIVE} ORDER BY id LIMIT :l)")
REPLAY_MANY = sa.text(f"{_REPLAY_SET} WHERE {_MANY} AND {_CODE_ALIVE} RETURNING id, lane, tenant_id")
REPLAY_REFUSED_MANY = sa.text(f"{_EXPIRED_CODES} AND n.id = ANY(:ids) ORDER BY n.id")
RESOLVE_MANY = sa.text(f"UPDATE notifications SET review = 'resolved' WHERE {_MANY} "
                       "AND coalesce(review, 'needs_review') <> 'resolved' RETURNING id, lane, tenant_id")
REPLAY_LANE_SINCE = sa.text(f"{_REPLAY_SET} WHERE {_LANE_SINCE_ALIVE} RETURNING id, lane, tenant_id")
REPLAY_REFUSED_LANE = sa.text(
    f"{_EXPIRED_CODES} AND n.id IN (SELECT id FROM notifications WHERE {_LANE_FILTER}) ORDER BY n.id LIMIT :l")
RESOLVE_LANE_SINCE = sa.text(
    f"UPDATE notifications SET review = 'resolved' WHERE {_LANE_SINCE} RETURNING id, lane, tenant_id")
COUNT_LANE_SINCE = sa.text(f"SELECT count(*) FROM notifications WHERE {_LANE_FILTER}")
COUNT_LANE_SINCE_REPLAYABLE = sa.text(f"SELECT count(*) FROM notifications WHERE {_LANE_FILTER} AND {_CODE_ALIVE}")

# ---- what holds an owed row (state.py) --------------------------------------------------------------------------
# Everything that may hold a page of owed rows, in ONE statement: each row's lease and due time; its lane's pause
# with since when and by whom (the audit log's first pause after the lane's last resume; the flag's own time when
# no audit row says); its tenant endpoint's breaker; its tenant's balance when that is short of the row's price and
# the row holds no money yet, with since when (the newest balance entry after which the balance stayed short of
# the price, read newest first and only as far back as needed); its recipient's quiet hours; the last failed
# attempt (its number and HTTP status). A lane's pause and a (tenant, price)'s shortfall are read once, however
# many rows of the page share them. Rows not owed (or another tenant's, `:t` given) are simply not in the answer.
OWED_STATES = sa.text(
    """
    WITH n AS (
      SELECT id, tenant_id, lane, channel, recipient, attempts, next_attempt_at, leased_until, last_error_class,
             cost_cents, reserved_cents, endpoint_id, created_at
      FROM notifications
      WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'QUEUED' AND (CAST(:t AS int) IS NULL OR tenant_id = :t)
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


SCAN_OWED = sa.text(_SCAN_OWED.format(lane=""))


# One lane's oldest owed rows, through the partial index notifications_owed_by_lane (lane, id): the relay keeps
# at most a window of each lane's wake-ups in Redis, so a 40,000-message campaign costs it a window, not 40,000.
SCAN_OWED_LANE = sa.text(_SCAN_OWED.format(lane="AND n.lane = :lane "))

# The bulk lane's fair window (fair.py): every (tenant, campaign) flow with owed bulk rows, by a skip scan over the
# partial index notifications_owed_bulk_flow — one index probe per flow, however many rows each owes — with the
# tenant's own bulk pace if it has one; then each flow's oldest owed rows (`SCAN_OWED_FLOW`), by the same index.
BULK_FLOWS = sa.text(
    """
    WITH RECURSIVE f AS (
      (SELECT tenant_id AS t, coalesce(campaign_id, 0) AS c FROM notifications
       WHERE status = 'QUEUED' AND lane = 'bulk' ORDER BY tenant_id, coalesce(campaign_id, 0) LIMIT 1)
      UNION ALL
      SELECT nx.t, nx.c FROM f CROSS JOIN LATERAL (
        SELECT tenant_id AS t, coalesce(campaign_id, 0) AS c FROM notifications
        WHERE status = 'QUEUED' AND lane = 'bulk' AND (tenant_id, coalesce(campaign_id, 0)) > (f.t, f.c)
        ORDER BY tenant_id, coalesce(campaign_id, 0) LIMIT 1) nx
    )
    SELECT f.t AS tenant_id, f.c AS campaign_id, tn.bulk_rate_per_second AS tenant_rate
    FROM f LEFT JOIN tenants tn ON tn.id = f.t ORDER BY f.t, f.c
    """
)
SCAN_OWED_FLOW = sa.text(_SCAN_OWED.format(
    lane="AND n.lane = 'bulk' AND n.tenant_id = :t AND coalesce(n.campaign_id, 0) = :c "))
SET_TENANT_BULK_RATE = sa.text(
    "UPDATE tenants SET bulk_rate_per_second = :r WHERE id = :t RETURNING id")

PUSH_LATENCY = sa.text("INSERT INTO refresh_metrics (kind, tenant_id, latency_ms) VALUES ('push', :t, :l)")

# ---- /ops (views.py) --------------------------------------------------------------------------------------------
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


# /ops' charts: per point (a span of :s minutes from t to e, e never past now), the WORST of the span — the most
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
    SELECT generate_series(to_timestamp(floor(extract(epoch FROM x.now) / (:s * 60)) * (:s * 60))
                             - make_interval(mins => :m - :s),
                           to_timestamp(floor(extract(epoch FROM x.now) / (:s * 60)) * (:s * 60)),
                           make_interval(mins => :s)) AS t, x.now,
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
OPS_SERIES_POINTS = sa.text(
    """
    WITH b AS (SELECT t, least(t + make_interval(mins => :s), CAST(:now AS timestamptz)) AS e
               FROM unnest(CAST(:ts AS timestamptz[])) AS t)
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
        WHERE n.created_at <= b.e AND (CAST(:t AS int) IS NULL OR n.tenant_id = :t)
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
        AND coalesce(n.sent_at, n.settled_at) < b.t + make_interval(mins => :s)
        AND n.sent_at IS NOT NULL AND n.intent_id IS NULL AND (CAST(:t AS int) IS NULL OR n.tenant_id = :t)) lat
    ORDER BY b.t
    """)
# The same points by brute force over the whole ledger: the depth counted afresh at every instant of a span where it
# can peak (its start, and each moment a row becomes owed in it), the oldest age at its end and just before each
# row's leaving. No sweep, no index: the reference the rollup must equal (tests/integration/test_ops_series.py) and
# the bench's raw baseline.
OPS_SERIES_WHOLE_LEDGER = sa.text(
    """
    WITH x AS (SELECT coalesce(CAST(:now AS timestamptz), now()) AS now),
    b AS (
      SELECT g.t, least(g.t + make_interval(mins => :s), x.now) AS e
      FROM x, generate_series(to_timestamp(floor(extract(epoch FROM x.now) / (:s * 60)) * (:s * 60))
                                - make_interval(mins => :m - :s),
                              to_timestamp(floor(extract(epoch FROM x.now) / (:s * 60)) * (:s * 60)),
                              make_interval(mins => :s)) AS g(t)
    ),
    r AS (
      SELECT n.created_at AS c, n.status = 'QUEUED' AS owed, n.next_attempt_at AS due,
             coalesce(n.sent_at, n.settled_at) AS left_at,
             CASE WHEN n.status = 'QUEUED' THEN n.next_attempt_at ELSE n.created_at END AS aged_from,
             n.sent_at, n.intent_id
      FROM notifications n WHERE (CAST(:t AS int) IS NULL OR n.tenant_id = :t)
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
    SELECT to_char(b.t AT TIME ZONE 'UTC', CAST(:f AS text)) AS minute,
           (SELECT max((SELECT count(*) FROM r WHERE r.c <= d.i AND ((r.owed AND r.due <= d.i) OR r.left_at > d.i)))
              FROM depth_at d WHERE d.t = b.t) AS depth,
           (SELECT coalesce(greatest(0, max((SELECT extract(epoch FROM max(a.i - r.aged_from)) FROM r
                                             WHERE r.c <= a.i AND ((r.owed AND r.due <= a.i) OR r.left_at > a.i)))), 0)
              FROM age_at a WHERE a.t = b.t) AS oldest_seconds,
           (SELECT count(*) FROM r WHERE r.sent_at >= b.t AND r.sent_at < b.t + make_interval(mins => :s)
              AND r.intent_id IS NULL) AS sent,
           (SELECT coalesce(max(extract(epoch FROM r.sent_at - r.c)), 0) FROM r
             WHERE r.sent_at >= b.t AND r.sent_at < b.t + make_interval(mins => :s) AND r.intent_id IS NULL)
             AS latency_max_seconds,
           (SELECT coalesce(avg(extract(epoch FROM r.sent_at - r.c)), 0) FROM r
             WHERE r.sent_at >= b.t AND r.sent_at < b.t + make_interval(mins => :s) AND r.intent_id IS NULL)
             AS latency_mean_seconds
    FROM b ORDER BY b.t
    """)
OPS_SERIES_KEPT = sa.text(
    "SELECT t AS at, depth_max, oldest_max_seconds, sent, latency_mean_seconds, latency_max_seconds "
    "FROM ops_series_points WHERE scope = :scope AND step_minutes = :s AND t = ANY(CAST(:ts AS timestamptz[]))")
OPS_SERIES_KEEP = sa.text(
    "INSERT INTO ops_series_points (scope, step_minutes, t, depth_max, oldest_max_seconds, sent, "
    "latency_mean_seconds, latency_max_seconds) "
    "SELECT :scope, :s, * FROM unnest(CAST(:ts AS timestamptz[]), CAST(:depth AS bigint[]), "
    "CAST(:oldest AS float8[]), CAST(:sent AS bigint[]), CAST(:mean AS float8[]), CAST(:max AS float8[])) "
    "ON CONFLICT DO NOTHING")

REVIEW_ITEMS = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE (CAST(:t AS integer) IS NULL "
    "OR n.tenant_id = :t) AND n.status = 'FAILED' "
    "AND coalesce(n.review, 'needs_review') <> 'resolved' ORDER BY n.id DESC LIMIT 50")
REFRESH_STATS = sa.text(
    "SELECT count(*) AS pushes, percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50, "
    "percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms) AS p99 FROM refresh_metrics "
    "WHERE kind = 'push' AND created_at > now() - interval '1 hour' "
    "AND (CAST(:t AS int) IS NULL OR tenant_id = :t)")
TENANTS = sa.text("SELECT id, name FROM tenants ORDER BY id")

# ---- /metrics (telemetry.py) ------------------------------------------------------------------------------------
# Upper bounds in seconds. One attempt's HTTP round trip, and commit to send (the SLO's 60 s is a bound).
SEND_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DELIVERY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


def _filters(expr: str, buckets: tuple[float, ...]) -> str:
    return ", ".join(f"count(*) FILTER (WHERE {expr} <= {b!r}) AS b{i}" for i, b in enumerate(buckets))


SEND_LATENCY = sa.text(f"""
SELECT n.lane, count(*) AS n, coalesce(sum(a.latency_ms), 0) / 1000.0 AS total,
       {_filters("a.latency_ms / 1000.0", SEND_BUCKETS)}
FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
WHERE a.latency_ms IS NOT NULL GROUP BY n.lane""")
# Commit to send, for rows that were owed at once: journey nudges are scheduled for later by design.
DELIVERY_LATENCY = sa.text(f"""
SELECT lane, count(*) AS n, coalesce(sum(extract(epoch FROM sent_at - created_at)), 0) AS total,
       {_filters("extract(epoch FROM sent_at - created_at)", DELIVERY_BUCKETS)}
FROM notifications WHERE sent_at IS NOT NULL AND intent_id IS NULL GROUP BY lane""")
ATTEMPT_OUTCOMES = sa.text("""
SELECT n.lane, a.outcome, coalesce(a.error_class, '') AS error_class, count(*) AS n
FROM notification_attempts a JOIN notifications n ON n.id = a.notification_id
GROUP BY n.lane, a.outcome, coalesce(a.error_class, '')""")
TENANT_MONEY = sa.text("""
SELECT b.tenant_id, b.balance_cents,
       coalesce((SELECT -sum(e.amount_cents) FROM balance_entries e WHERE e.tenant_id = b.tenant_id
                 AND e.kind IN ('reserve', 'refund') AND e.created_at > now() - interval '1 hour'), 0)
         AS spent_last_hour_cents
FROM balances b ORDER BY b.tenant_id""")


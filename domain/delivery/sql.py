"""Delivery's named SQL for the claim: the lease, the take, and the long way's settlements before a send.

Each is ONE statement (a CTE), written once with `:name` parameters. A `Statement` holds it in the form each store
runs: `.sa` for the long way (long_way.py, on a `UnitOfWork`: the SQLAlchemy engine's, or the workers' connection
through `domain.db.run_sync`), `.pg` for the workers' common case (store.py, psycopg's pool, prepared). Statements
only the long way runs are plain `sa.text`.

- `CLAIM`: the guarded lease and the next fence token (FOR UPDATE of the row, taken by the UPDATE; a row another
  claim holds is skipped by the guard, not waited on for long), and everything the decision and the send need:
  envelope, order status, intent and lead, campaign, the recipient's floor rules and contact point, their cap
  counts around today, the newest template for the channel and a one-time code's nonce and end of life (the floor
  suppresses a code claimed after it: `code_expired`); for a tenant endpoint's webhook, whether the endpoint is
  still there, enabled, and its breaker closed (never its URL or secrets).
- `TAKE`: for a message that may go: its cap slot, the template version kept on the row, and its price. Mirrors
  domain/ledger/metering.py's `take_cap_slot` and `reserve` (same rows, same entries, same lock order: the row, its
  cap counter, then the balance, taken last and committed right after).

The record's statements are in sql_record.py; the operators' (lanes, review) in sql_review.py; the read models
(what holds an owed row, the relay's scan, /ops, /metrics) in sql_reads.py.
"""

from __future__ import annotations

import re
from typing import Final

import sqlalchemy as sa

_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)\b")


def for_psycopg(sql: str) -> str:
    """The same statement with psycopg's `%(name)s` placeholders (the text holds no literal `%` or `::` cast)."""
    assert "%" not in sql and "::" not in sql, "escape or avoid % and :: in delivery SQL"
    return _PARAM.sub(r"%(\1)s", sql)


class Statement:
    """One named statement, in the form each store runs it: `sa` (SQLAlchemy) and `pg` (psycopg's placeholders)."""

    __slots__ = ("pg", "sa", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sa = sa.text(text)
        self.pg = for_psycopg(text)


# The claim's pieces, shared by `CLAIM` (one row by id) and `CLAIM_BATCH` (up to :limit due rows of one lane).
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

# CLAIM: one owed row leased by id, with everything its decision and its send need.
CLAIM: Final = Statement(f"""
WITH c AS (
  {_CLAIM_SET}
  WHERE id = :id AND {_CLAIMABLE.format(due="next_attempt_at <= now() + interval '1 second'")}
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}""")

# CLAIM_IN_MONTH: `CLAIM` of one row in the month its wake-up names.
# `CLAIM` of a row whose month its wake-up carries (the relay's scan read the row's `created_at`, the ledger's
# partition key, and the per-row job holds it): planned on that month's partition alone.
CLAIM_IN_MONTH: Final = Statement(f"""
WITH c AS (
  {_CLAIM_SET}
  WHERE id = :id AND created_at = CAST(:created_at AS timestamptz)
    AND {_CLAIMABLE.format(due="next_attempt_at <= now() + interval '1 second'")}
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}""")

# CLAIM_BATCH: up to :limit due rows of one lane leased at once, oldest due first.
# `CLAIM` for up to :limit due rows of one lane at once (a batched lane's drain loop, jobs/batches.py): the oldest due
# first, each its own lease and next fence token; a row another claim (or the relay's scan) holds is skipped, not
# waited on (SKIP LOCKED), so two loops or two workers never claim one row. The pick is a MATERIALIZED CTE: it is
# evaluated once, whatever the plan of the UPDATE. Served by notifications_owed_by_lane_due (migration 0025).
CLAIM_BATCH: Final = Statement(f"""
WITH picked AS MATERIALIZED (
  SELECT id, created_at FROM notifications
  WHERE lane = :lane AND {_CLAIMABLE.format(due="next_attempt_at <= now()")}
  ORDER BY next_attempt_at, id LIMIT :limit FOR UPDATE SKIP LOCKED
), c AS (
  {_CLAIM_SET}
  WHERE (id, created_at) IN (SELECT id, created_at FROM picked)
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}""")

# BULK_DUE_FLOWS: the bulk lane's (tenant, campaign) flows that owe rows, with their pace and channel.
# The bulk lane's flows, for its batch (jobs/batches.py `deliver_bulk_batch`) and for the relay's fair window
# (fair_queue.py): every (tenant, campaign) with owed bulk rows, by a skip scan over notifications_owed_bulk_flow (one
# index probe per flow, however many rows each owes), with the tenant's own pace and the campaign's channel (NULL for a
# tenant's one-by-one bulk messages, campaign 0).
BULK_DUE_FLOWS: Final = Statement("""
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
""")

# CLAIM_BULK_BATCH: up to :limit due bulk rows leased at once, shared fairly between flows within quotas.
# Then the claim: up to :limit due rows, shared fairly between the flows given (:flow_tenants, :flow_campaigns) —
# each flow's oldest due rows (by its index, SKIP LOCKED: two loops never wait on each other), ranked by start-time
# fair queueing within the batch (a row's virtual time: its rank in its flow × its tenant's flows in the batch, so
# tenants share a batch equally and a tenant's campaigns share its turn) — and never more rows of a channel than the
# tokens taken from that channel's bucket (:channels, :quotas), nor more of a capped tenant than its moments
# reserved (:capped_tenants, :capped_quotas).
# Each row its own lease and next fence token, exactly as `CLAIM_BATCH`; a cancelled campaign's row is claimed
# like any other and refused by `plan` (campaign_status), never sent.
CLAIM_BULK_BATCH: Final = Statement(f"""
WITH cand AS (
  SELECT x.id, x.created_at, x.channel, f.t, f.c, row_number() OVER (PARTITION BY f.t, f.c ORDER BY x.id) AS rn
  FROM unnest(CAST(:flow_tenants AS int[]), CAST(:flow_campaigns AS bigint[])) AS f(t, c)
  CROSS JOIN LATERAL (
    SELECT id, created_at, channel FROM notifications
    WHERE status = 'QUEUED' AND lane = 'bulk' AND tenant_id = f.t AND coalesce(campaign_id, 0) = f.c
      AND channel = ANY(CAST(:channels AS text[]))
      AND {_CLAIMABLE.format(due="next_attempt_at <= now()")}
    ORDER BY tenant_id, coalesce(campaign_id, 0), id LIMIT :limit FOR UPDATE SKIP LOCKED) x
), ranked AS (
  SELECT id, created_at, channel, t, rn * count(*) FILTER (WHERE rn = 1) OVER (PARTITION BY t) AS vt FROM cand
), numbered AS (
  SELECT id, created_at, channel, t, vt, row_number() OVER (PARTITION BY channel ORDER BY vt, t, id) AS chn,
         row_number() OVER (PARTITION BY t ORDER BY vt, id) AS tn FROM ranked
), pick AS (
  SELECT p.id, p.created_at FROM numbered p
  JOIN unnest(CAST(:channels AS text[]), CAST(:quotas AS int[])) AS q(ch, quota) ON q.ch = p.channel
  LEFT JOIN unnest(CAST(:capped_tenants AS int[]), CAST(:capped_quotas AS int[])) AS k(t, quota) ON k.t = p.t
  WHERE p.chn <= q.quota AND (k.t IS NULL OR p.tn <= k.quota)
  ORDER BY p.vt, p.t, p.id LIMIT :limit
), c AS (
  {_CLAIM_SET}
  WHERE (id, created_at) IN (SELECT id, created_at FROM pick)
  {_CLAIM_RETURNING}
){_CLAIM_JOINED}""")

# The take's pieces, shared by `TAKE` and `TAKE_OR_ABORT`: for a message that may go, its cap slot (guarded: at the
# cap it takes nothing), the template version kept on the row, and its price (guarded: `balance >= price` or
# nothing; money only once the slot is taken).
_TAKE_STEPS = """
WITH slot AS (
  INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken)
  SELECT CAST(:tenant_id AS int), CAST(:recipient AS text), CAST(:day AS date), 1
  WHERE CAST(:day AS date) IS NOT NULL
  ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1
  WHERE recipient_daily_counts.taken < :cap
  RETURNING taken
), ok AS (
  SELECT CAST(:day AS date) IS NULL OR EXISTS (SELECT 1 FROM slot) AS slot_ok
), b AS (
  UPDATE balances SET balance_cents = balance_cents - :cents
  WHERE tenant_id = :tenant_id AND balance_cents >= :cents AND :cents > 0 AND (SELECT slot_ok FROM ok)
  RETURNING tenant_id
), e AS (
  INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason)
  SELECT tenant_id, CAST(:id AS bigint), 'reserve', -CAST(:cents AS int), CAST(:reason AS text) FROM b
), u AS (
  UPDATE notifications
  SET cap_day = CASE WHEN EXISTS (SELECT 1 FROM slot) THEN CAST(:day AS date) ELSE cap_day END,
      template_version = CASE WHEN (SELECT slot_ok FROM ok)
                              THEN coalesce(CAST(:template_version AS int), template_version)
                              ELSE template_version END,
      reserved_cents = CASE WHEN EXISTS (SELECT 1 FROM b) THEN :cents ELSE reserved_cents END
  WHERE id = :id AND created_at = CAST(:created_at AS timestamptz)
)
"""

# TAKE: the common case's take, answering what it took (`slot_ok`, `paid`): the caller decides on a refusal.
TAKE: Final = Statement(_TAKE_STEPS + "SELECT (SELECT slot_ok FROM ok) AS slot_ok, "
                        "(:cents <= 0 OR EXISTS (SELECT 1 FROM b)) AS paid\n")

# What a refused take's answer fails with (`TAKE_OR_ABORT`, `TAKE_BATCH`): the caller tells a refusal by it.
TAKE_REFUSED: Final[str] = "take refused"

# TAKE_OR_ABORT: `TAKE` that fails its own transaction when refused (a COMMIT sent with it).
# `TAKE` for a claim that sends its COMMIT in the same round trip (the bulk lane's, domain/delivery/store.py): the take
# holds the tenant's balance row, which the tenant's one-time codes take too, and a COMMIT that waits for a busy,
# niced bulk worker's next turn held it for tens of milliseconds. Refused (no cap slot, no money), it must abort its
# transaction itself: its answer fails (SQLSTATE 22P02, `TAKE_REFUSED`) and the COMMIT after it rolls back.
TAKE_OR_ABORT: Final = Statement(_TAKE_STEPS + f"""SELECT CAST(
  CASE WHEN (SELECT slot_ok FROM ok) AND (:cents <= 0 OR EXISTS (SELECT 1 FROM b)) THEN 'true'
       ELSE '{TAKE_REFUSED}: slot ' || CAST((SELECT slot_ok FROM ok) AS text) END AS boolean) AS taken
""")

# TAKE_BATCH: every take of a batch in one statement, all or nothing.
# Every take of a bulk batch in one statement (`TAKE` set-based): each row's cap slot, then each tenant's money for
# its rows at once, the balance entries and the rows' held cents. All or nothing, and the COMMIT in the same round
# trip (like `TAKE_OR_ABORT`: a tenant's balance row, which its one-time codes take too, is held only while the
# server runs it): a slot or a balance refused fails it (`TAKE_REFUSED`), the whole claim rolls back, and the
# batch is claimed again row by row under savepoints (`CLAIM_BATCH`'s way). One row per (tenant, recipient, day).
TAKE_BATCH: Final = Statement(f"""
WITH x AS (
  SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:tenant_ids AS int[]), CAST(:recipients AS text[]),
                       CAST(:days AS date[]), CAST(:caps AS int[]), CAST(:cents AS int[]),
                       CAST(:template_versions AS int[]), CAST(:reasons AS text[]), CAST(:created_ats AS timestamptz[]))
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
    AND notifications.created_at = ANY(CAST(:created_ats AS timestamptz[]))
)
SELECT CAST(
  CASE WHEN (SELECT count(*) FROM slot) = (SELECT count(*) FROM x WHERE day IS NOT NULL)
        AND (SELECT count(*) FROM b) = (SELECT count(*) FROM owe) THEN 'true'
       ELSE '{TAKE_REFUSED}: batch' END AS boolean) AS taken
""")


# UNCLAIMED: why `CLAIM` matched nothing: the lane paused, or the row still claimable.
# Why `CLAIM` matched nothing, read just after it: the lane is paused now, or the row is still claimable with the
# lane running (resumed between the claim and this read: claim again), or neither (done, leased, not yet due).
UNCLAIMED: Final = Statement("""
SELECT EXISTS (SELECT 1 FROM lane_controls l WHERE l.lane = :lane AND l.paused) AS paused,
       EXISTS (SELECT 1 FROM notifications WHERE id = :id AND status = 'QUEUED'
               AND next_attempt_at <= now() + interval '1 second'
               AND (leased_until IS NULL OR leased_until < now())) AS claimable""")

# NEXT_DUE_IN_LANE: seconds until a lane's next unleased owed row comes due.
# When the next row of a lane comes due that no live lease holds (a retry's backoff, a deferral, a lease running
# out): a batched lane's idle loop sleeps until then instead of a whole idle poll. Served by
# notifications_owed_by_lane_due; the rows leased now (at most the lane's batches in flight) are stepped over, and
# a paused lane has nothing due (its loop waits out its poll).
# NULL when nothing is owed (so `min(...)` alone, never `greatest(min(...), now())`, which would say "due now" for
# an empty lane and wake an idle loop every NEXT_DUE_FLOOR_S). The caller takes a past due time as 0.
NEXT_DUE_IN_LANE: Final = Statement(f"""
SELECT extract(epoch FROM min(next_attempt_at) - now()) AS due_in_s FROM (
  SELECT next_attempt_at FROM notifications
  WHERE lane = :lane AND {_CLAIMABLE.format(due="TRUE")}
  ORDER BY next_attempt_at, id LIMIT 1) n""")

# CHANNEL_OF: a bulk row's route before its claim: the channel's bucket, the tenant's (and its own pace, if it has one).
CHANNEL_OF: Final = Statement(
    "SELECT n.channel, n.tenant_id, t.bulk_rate_per_second AS tenant_rate FROM notifications n "
    "LEFT JOIN tenants t ON t.id = n.tenant_id WHERE n.id = :id AND n.status = 'QUEUED'")
# CHANNEL_OF_IN_MONTH: `CHANNEL_OF` of a row whose month its wake-up carries (as `CLAIM_IN_MONTH`).
CHANNEL_OF_IN_MONTH: Final = Statement(
    "SELECT n.channel, n.tenant_id, t.bulk_rate_per_second AS tenant_rate FROM notifications n "
    "LEFT JOIN tenants t ON t.id = n.tenant_id "
    "WHERE n.id = :id AND n.created_at = CAST(:created_at AS timestamptz) AND n.status = 'QUEUED'")


# ---- the long way of the claim (long_way.py) --------------------------------------------------------------------
# CAP_TAKEN: how many cap slots a recipient has taken on a day.
CAP_TAKEN = sa.text("SELECT taken FROM recipient_daily_counts "
                    "WHERE tenant_id = :tenant_id AND recipient = :recipient AND day = :day")
# OPT_OUT_CHANGE: the recipient change that opted them out of a channel, newest first.
OPT_OUT_CHANGE = sa.text(
    "SELECT ch.changed_at, ch.actor_ref FROM recipient_changes ch JOIN recipients r ON r.id = ch.recipient_id "
    "WHERE r.tenant_id = :tenant_id AND r.ref = :recipient AND ch.field = 'opted_out_channels' "
    "AND ch.new_value LIKE :channel_like ORDER BY ch.id DESC LIMIT 1")
# DEFER: a claimed row deferred to a time, its attempt given back, under its claim's token.
DEFER = sa.text(
    "UPDATE notifications SET attempts = attempts - 1, next_attempt_at = :until, leased_until = NULL, "
    "reason_detail = :detail WHERE id = :id AND created_at = CAST(:created_at AS timestamptz) "
    "AND status = 'QUEUED' AND claim_token = :claim_token")
# GIVE_BACK_ATTEMPT: a claimed row's attempt count given back, under its claim's token.
# A claim that must not run (its attempts were used up): its count given back before the row settles.
GIVE_BACK_ATTEMPT = sa.text(
    "UPDATE notifications SET attempts = attempts - 1 "
    "WHERE id = :id AND created_at = CAST(:created_at AS timestamptz) AND status = 'QUEUED' "
    "AND claim_token = :claim_token")
# GIVE_BACK: a claimed row owed again at once, its attempt given back, under its claim's token.
GIVE_BACK = sa.text(
    "UPDATE notifications SET attempts = attempts - 1, leased_until = NULL, next_attempt_at = now() "
    "WHERE id = :id AND created_at = CAST(:created_at AS timestamptz) AND status = 'QUEUED' "
    "AND claim_token = :claim_token RETURNING id")

"""What the ledger asks of the database, named in one place: the way in, the ways out, recipients, one-time codes
and templates (metering's statements are in `sql_metering.py`, the read models' in `sql_reads.py`). Nearly every
statement is `text()`: each leans on PostgreSQL
(`ON CONFLICT`, data-modifying CTEs, `FOR UPDATE`, `FILTER`, arrays); the many-row settle is Core, its scope composed
from the caller's campaign or intents (`settle_unleased`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import sqlalchemy as sa

from domain.models import Notification, table_of
from domain.vocabulary import JOB_ID_SQL, NOTIFY_CHANNEL
from domain.vocabulary import (
    NOTIFY_OWED as NOTIFY_OWED,  # the relay's wake-up, sent inside the writing transaction
)

# ---- the way in ----------------------------------------------------------------------------------------------
# What a new row costs, read from the tenant's price list inside the INSERT.
_PRICE = "coalesce((SELECT price_cents FROM channel_prices WHERE tenant_id = :t AND channel = CAST(:c AS varchar)), 0)"
# INSERT_MESSAGES: messages ledgered in one statement, each once by its dedupe key.
# Messages in one statement, one round trip: each record of `:rows`, in the order of its `n`, is inserted with its
# price read from the tenant's price list, its id drawn from the sequence first so its arq job id (`JOB_ID_SQL`) is
# written with it (no UPDATE after), and its dedupe key: an existing key means skip, and that row is not returned.
# The key is kept once across every month in `ledger_keys` (the ledger is partitioned by month, and a partitioned
# table's unique keys must hold the month): the key first, `ON CONFLICT DO NOTHING` — a concurrent writer of the
# same key waits for ours and then skips, as `ON CONFLICT (dedupe_key)` on the ledger did — and the row only for a
# key that was new, in the same statement.
# `:rows` is one JSON array, not a typed array per column: psycopg dumping a dozen arrays was a large share of the
# order command's CPU (the profile: evidence/bench.md).
# The relay hears of every lane that got a row (`pg_notify` is transactional: only if the caller commits; one per
# lane, as PostgreSQL folds equal notifications of a transaction into one anyway). Before, a message was three
# statements (insert, set job id, notify): the order command's two rows were six round trips.
INSERT_MESSAGES = sa.text(
    f"""
    WITH m AS (
      SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb))
        AS m(n integer, t integer, r text, c text, l text, tpl text, p jsonb, k text, at timestamptz, e uuid,
             o bigint, i bigint, ep integer)
    ), keyed AS (
      SELECT m.*, nextval('notifications_id_seq') AS nid FROM m ORDER BY m.n
    ), kept AS (
      INSERT INTO ledger_keys (dedupe_key, notification_id, created_at, tenant_id)
      SELECT k.k, k.nid, now(), k.t FROM keyed k ORDER BY k.n
      ON CONFLICT (dedupe_key) DO NOTHING
      RETURNING notification_id
    ), ins AS (
      INSERT INTO notifications (id, job_id, tenant_id, recipient, channel, lane, template, payload, dedupe_key,
                                 status, cost_cents, next_attempt_at, event_id, order_id, intent_id, attempts,
                                 max_attempts, reserved_cents, endpoint_id, created_at)
      SELECT k.nid, {JOB_ID_SQL.replace("|| id", "|| k.nid")}, k.t, k.r, k.c, k.l, k.tpl, k.p, k.k, 'QUEUED',
             coalesce((SELECT price_cents FROM channel_prices cp WHERE cp.tenant_id = k.t AND cp.channel = k.c), 0),
             coalesce(k.at, now()), k.e, k.o, k.i, 0, :max, 0, k.ep, now()
      FROM keyed k JOIN kept ON kept.notification_id = k.nid ORDER BY k.n
      RETURNING id, lane, status, job_id, dedupe_key, created_at
    )
    SELECT i.id, i.lane, i.status, i.job_id, i.dedupe_key, i.created_at,
           (SELECT count(pg_notify('{NOTIFY_CHANNEL}', x.lane)) FROM (SELECT DISTINCT lane FROM ins) x) AS notified
    FROM ins i
    """
)
# EXISTING: the rows already ledgered for keys the insert skipped.
# The rows already there for keys the insert skipped (READ COMMITTED: this later statement sees the winner's row).
# Through the key (its id and month: one partition). A key whose month was archived answers its id, status ARCHIVED:
# never ledgered again.
EXISTING = sa.text(
    "SELECT k.notification_id AS id, coalesce(n.lane, '') AS lane, coalesce(n.status, 'ARCHIVED') AS status, "
    "coalesce(n.job_id, '') AS job_id, k.dedupe_key, k.created_at FROM ledger_keys k "
    "LEFT JOIN notifications n ON n.id = k.notification_id AND n.created_at = k.created_at "
    "WHERE k.dedupe_key = ANY(CAST(:k AS text[]))")


def insert_audience_batch(audience: str) -> sa.TextClause:
    """A campaign's next batch in one statement: the next `:n` people of `recipients r` after id `:after` that the
    audience condition (SQL over `r`, from the campaign's segment) selects, each ledgered with its dedupe key
    `:prefix || ref || :suffix` (an existing key means skip: kept first in `ledger_keys`, as `INSERT_MESSAGES`
    does). Answers how many were picked and inserted, and the
    last recipient id picked (the keyset position to resume after).

    Each row's id is drawn from its sequence before the insert so its arq job id (`JOB_ID_SQL`) is written with it:
    setting job ids by an UPDATE after the insert wrote every row of a campaign twice (measured under load: 39,011
    rows inserted in 6.7 s, then 9.2 s more for the UPDATE). A conflicting key wastes its sequence value: ids have
    gaps, never meaning."""
    return sa.text(
        f"""
        WITH picked AS (
          SELECT r.id, r.ref FROM recipients r
          WHERE r.tenant_id = :t AND r.id > :after AND {audience}
          ORDER BY r.id LIMIT :n
        ), keyed AS (
          SELECT p.id, p.ref, nextval('notifications_id_seq') AS nid FROM picked p
        ), kept AS (
          INSERT INTO ledger_keys (dedupe_key, notification_id, created_at, tenant_id)
          SELECT :prefix || k.ref || :suffix, k.nid, now(), :t FROM keyed k ORDER BY k.id
          ON CONFLICT (dedupe_key) DO NOTHING
          RETURNING notification_id
        ), ins AS (
          INSERT INTO notifications (id, job_id, tenant_id, recipient, channel, lane, template, payload, dedupe_key,
                                     status, cost_cents, next_attempt_at, attempts, max_attempts, reserved_cents,
                                     campaign_id, created_at)
          SELECT k.nid, {JOB_ID_SQL.replace("|| id", "|| k.nid")}, :t, k.ref, CAST(:c AS varchar), :l, :tpl,
                 CAST(:p AS jsonb), :prefix || k.ref || :suffix, 'QUEUED', {_PRICE}, now(), 0,
                 :max, 0, :cid, now()
          FROM keyed k JOIN kept ON kept.notification_id = k.nid ORDER BY k.id
          RETURNING id
        )
        SELECT (SELECT count(*) FROM ins) AS inserted, (SELECT max(id) FROM picked) AS last_id,
               (SELECT count(*) FROM picked) AS picked
        """)


# RECIPIENT_REF: a recipient's ref, by id.
RECIPIENT_REF = sa.text("SELECT ref FROM recipients WHERE tenant_id = :t AND id = :i")
# TEMPLATE_CHANNELS: the channels of a template's newest version.
TEMPLATE_CHANNELS = sa.text("SELECT channels FROM templates WHERE name = :n ORDER BY version DESC LIMIT 1")

# ---- the ways out --------------------------------------------------------------------------------------------
# SETTLE_UNSENT: an owed row settled unsent (suppressed or failed), under its claim's token.
SETTLE_UNSENT = sa.text(
    "UPDATE notifications SET status = CAST(:s AS text), suppressed_reason = :r, reason_detail = :d, "
    "last_error_class = coalesce(:e, last_error_class), review = :rv, settled_at = now(), leased_until = NULL "
    "WHERE id = :id AND status = 'QUEUED' AND claim_token = :tok RETURNING intent_id")
NOTIFICATIONS = table_of(Notification)


def settle_unleased(reason: str, *, campaign_id: int | None = None,
                    intent_ids: Collection[int] | sa.Select[tuple[int]] | None = None,
                    endpoint: tuple[int, int] | None = None, detail: str | None = None,
                    skip_locked: bool = False) -> sa.Update:
    """QUEUED -> SUPPRESSED (`reason`, and `detail` in plain words) for one campaign's rows, the given intents' rows
    (ids, or a SELECT judged inside this one UPDATE, on its snapshot) or one (tenant, endpoint)'s rows that no live
    lease holds; returns each row's id, intent and whether it holds anything (only a row a claim already charged, a
    retry in progress, holds money or a cap slot)."""
    n = NOTIFICATIONS
    unleased = sa.or_(n.c.leased_until.is_(None), n.c.leased_until < sa.func.now())
    scope: sa.ColumnElement[bool]
    if endpoint is not None:
        # Run by the record that disables the endpoint, which holds the endpoint's row: a row another record holds
        # (a stalled worker's, its lease run out, waiting for that endpoint row) is skipped, not waited for — that
        # wait was a deadlock. Its next claim settles it with the endpoint's reason.
        scope = n.c.id.in_(sa.select(n.c.id).where(
            n.c.tenant_id == endpoint[0], n.c.endpoint_id == endpoint[1], n.c.status == "QUEUED", unleased,
        ).with_for_update(skip_locked=True))
    elif campaign_id is not None and skip_locked:
        # A campaign's cancel, in passes (campaigns.fan_out.cancel): a row another transaction holds is left for the
        # next pass. Waiting for it while holding thousands of others deadlocked against bulk workers' records.
        scope = n.c.id.in_(sa.select(n.c.id).where(
            n.c.campaign_id == campaign_id, n.c.status == "QUEUED", unleased).with_for_update(skip_locked=True))
    elif campaign_id is not None:
        scope = n.c.campaign_id == campaign_id
    elif isinstance(intent_ids, sa.Select):
        scope = n.c.intent_id.in_(intent_ids)
    else:
        scope = n.c.intent_id.in_(list(intent_ids or ()))
    return (
        sa.update(n)
        .where(scope, n.c.status == "QUEUED", unleased)
        .values(status="SUPPRESSED", suppressed_reason=reason, settled_at=sa.func.now(), leased_until=None,
                **({"reason_detail": detail} if detail is not None else {}))
        .returning(n.c.id, n.c.intent_id, ((n.c.reserved_cents > 0) | n.c.cap_day.is_not(None)).label("holds"))
    )


# COUNT_UNLEASED_OF_CAMPAIGN: how many of a campaign's owed rows no worker holds.
COUNT_UNLEASED_OF_CAMPAIGN = sa.text(
    "SELECT count(*) FROM notifications WHERE campaign_id = :c AND status = 'QUEUED' "
    "AND (leased_until IS NULL OR leased_until < now())")
# LOCK_INTENT: a nudge intent locked while its row settles.
LOCK_INTENT = sa.text("SELECT 1 FROM lead_notification_intents WHERE id = :i FOR NO KEY UPDATE")
# FINISH_INTENT_IF_NOTHING_LEFT: a live nudge intent suppressed when none of its messages is owed or sent.
FINISH_INTENT_IF_NOTHING_LEFT = sa.text(
    "UPDATE lead_notification_intents i SET status = 'suppressed', final_reason = :why, updated_at = now() "
    "WHERE i.id = :i AND i.status IN ('pending', 'scheduled') AND NOT EXISTS ("
    "  SELECT 1 FROM notifications n WHERE n.intent_id = i.id AND n.status IN ('QUEUED', 'SENT', 'DELIVERED'))")
# READ_FOR_TRUTH: what a row says, locked, before an accepted send is recorded on it.
READ_FOR_TRUTH = sa.text(
    "SELECT status, suppressed_reason, last_error_class, reserved_cents, cost_cents, tenant_id, channel, "
    "template, intent_id, provider_reference, recipient, lane, cap_day, coalesce(provider_key, dedupe_key) "
    "AS current_key FROM notifications WHERE id = :id FOR UPDATE")
# RECORD_AGAIN: an accepted send's status and reference set on a row that ended unsent (the late truth).
RECORD_AGAIN = sa.text(
    "UPDATE notifications SET status = CAST(:s AS text), provider_reference = coalesce(provider_reference, :p), "
    "settled_at = CASE WHEN CAST(:s AS text) = 'DELIVERED' THEN coalesce(settled_at, now()) END "
    "WHERE id = :id")
# RECORD_SENT: an accepted send recorded on its row, the token moved on to fence out any later claim.
# A claim that follows (a second worker whose lease began after ours ran out) is fenced out by the new token.
RECORD_SENT = sa.text(
    "UPDATE notifications SET status = CAST(:s AS text), provider_reference = coalesce(:p, provider_reference), "
    "sent_at = coalesce(sent_at, now()), settled_at = CASE WHEN CAST(:s AS text) = 'DELIVERED' THEN now() END, "
    "leased_until = NULL, last_error_class = NULL, suppressed_reason = NULL, review = NULL, reason_detail = :d, "
    "claim_token = claim_token + 1 WHERE id = :id")
# SET_REASON_DETAIL: a row's reason detail set.
SET_REASON_DETAIL = sa.text("UPDATE notifications SET reason_detail = :d WHERE id = :id")
# INTENT_SENT: a live nudge intent marked sent.
INTENT_SENT = sa.text(
    "UPDATE lead_notification_intents SET status = 'sent', updated_at = now(), "
    "final_reason = 'sent at ' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') || ' UTC' "
    "WHERE id = :i AND status IN ('pending', 'scheduled')")
# RECIPIENT_CAP: a recipient's daily cap and time zone.
RECIPIENT_CAP = sa.text("SELECT daily_cap, timezone FROM recipients WHERE tenant_id = :t AND ref = :r")

# ---- receipts kept pending, settled with their row (write.settle_receipts) ----------------------------------
# PENDING_ON_ROWS: the receipts pending on rows just settled, with how each row stands.
# A provider's receipt waits (`applied_at` NULL) only while its row is owed; whatever settles the row settles the
# receipts pending on it, in the same transaction, by these three statements. `:ids` are the rows just settled.
# What is pending on them, with how each row stands (through the partial index `delivery_receipts_pending`: nearly
# always nothing, and then this one probe is all). The few receipts that move the row and its money are applied one
# at a time against the row as it then stands: a `delivered` one on a row not DELIVERED (the truth, `accept_truth`),
# a `failed` one on a SENT row (the refund).
PENDING_ON_ROWS = sa.text(
    "SELECT r.id, r.received_at, r.notification_id, r.provider_reference, r.outcome, n.status "
    "FROM delivery_receipts r JOIN notifications n ON n.id = r.notification_id "
    "WHERE r.notification_id = ANY(CAST(:ids AS bigint[])) AND r.applied_at IS NULL "
    "ORDER BY r.notification_id, r.id")
# DELIVER_SENT_ROWS: the common receipt, one statement for a whole batch: `delivered` on a row SENT.
# Charged at the send, so no money moves: the row DELIVERED and the receipt applied, together or not at all; a row's
# second `delivered`
# receipt is left to `SETTLE_RECEIPTS` (it then agrees with a DELIVERED row), and a row with a `failed` receipt
# before it to the one-at-a-time way (in the order they came). Answers the receipts applied.
DELIVER_SENT_ROWS = sa.text(
    """
    WITH p AS (
      SELECT DISTINCT ON (r.notification_id) r.id, r.received_at, r.notification_id, r.provider_reference
      FROM delivery_receipts r JOIN notifications n ON n.id = r.notification_id
      WHERE r.notification_id = ANY(CAST(:ids AS bigint[])) AND r.applied_at IS NULL AND r.outcome = 'delivered'
        AND n.status = 'SENT' AND NOT EXISTS (
          SELECT 1 FROM delivery_receipts f WHERE f.notification_id = r.notification_id AND f.applied_at IS NULL
            AND f.outcome = 'failed' AND f.id < r.id)
      ORDER BY r.notification_id, r.id
    ), delivered AS (
      UPDATE notifications n SET status = 'DELIVERED',
             provider_reference = coalesce(n.provider_reference, p.provider_reference),
             settled_at = coalesce(n.settled_at, now())
      FROM p WHERE n.id = p.notification_id AND n.status = 'SENT'
      RETURNING n.id
    ), applied AS (
      UPDATE delivery_receipts r SET applied_at = now()
      FROM p WHERE r.id = p.id AND r.received_at = p.received_at AND r.applied_at IS NULL
        AND p.notification_id IN (SELECT id FROM delivered)
      RETURNING r.id, r.notification_id
    )
    SELECT id, notification_id FROM applied
    """)
# ROW_FOR_RECEIPT: a row's status, locked, before a receipt moves it.
ROW_FOR_RECEIPT = sa.text("SELECT status FROM notifications WHERE id = :n FOR UPDATE")
# SENT_UNDELIVERABLE: a SENT row failed as undeliverable (a `failed` receipt).
SENT_UNDELIVERABLE = sa.text(
    "UPDATE notifications SET status = 'FAILED', settled_at = now(), last_error_class = 'undeliverable' "
    "WHERE id = :n AND status = 'SENT'")
# RECEIPT_APPLIED: a pending receipt marked applied.
RECEIPT_APPLIED = sa.text("UPDATE delivery_receipts SET applied_at = now() WHERE id = :i AND received_at = :at "
                          "AND applied_at IS NULL RETURNING id")
# SETTLE_RECEIPTS: every other receipt pending on settled rows applied or closed, by how each row ended.
# Every other receipt pending on a settled row, in one statement, by how the row ended: on a FAILED row a `failed`
# one is applied (the row says `undeliverable`: a replay is then a new message for the provider); a `delivered`
# one on a DELIVERED row is applied (it agrees); a `failed` one on a DELIVERED row, or on a row settled unsent
# (SUPPRESSED: nothing was charged, so nothing to refund), is closed with why — and a SUPPRESSED row it bounced
# says `undeliverable` too, so a stalled worker's late 2xx for that send is old news (write.accept_truth), not a
# late truth that charges a message the provider could not deliver. A row still owed keeps its own. `:before`
# (or NULL: all): only the receipts that came before that one (settled against the row as it stands, before that
# receipt moves it: write.settle_receipts keeps the order they came in).
SETTLE_RECEIPTS = sa.text(
    """
    WITH p AS (
      SELECT r.id, r.received_at, r.outcome, n.id AS nid, n.status, n.suppressed_reason
      FROM delivery_receipts r JOIN notifications n ON n.id = r.notification_id
      WHERE r.notification_id = ANY(CAST(:ids AS bigint[])) AND r.applied_at IS NULL AND n.status <> 'QUEUED'
        AND (CAST(:before AS bigint) IS NULL OR r.id < CAST(:before AS bigint))
        AND NOT (r.outcome = 'delivered' AND n.status <> 'DELIVERED')
        AND NOT (r.outcome = 'failed' AND n.status = 'SENT')
    ), bounced AS (
      UPDATE notifications n SET last_error_class = 'undeliverable', review = NULL
      WHERE n.id IN (SELECT nid FROM p WHERE p.status IN ('FAILED', 'SUPPRESSED') AND p.outcome = 'failed')
    ), s AS (
      UPDATE delivery_receipts r SET applied_at = now(), closed_reason = CASE
          WHEN p.outcome = 'failed' AND p.status = 'DELIVERED'
            THEN 'no longer applies: the provider had said delivered; DELIVERED is final'
          WHEN p.outcome = 'failed' AND p.status = 'SUPPRESSED'
            THEN 'no longer applies: the message was settled unsent (' || coalesce(p.suppressed_reason, 'suppressed')
                 || ') before the answer was recorded; nothing was charged'
        END
      FROM p WHERE r.id = p.id AND r.received_at = p.received_at AND r.applied_at IS NULL
      RETURNING r.id
    )
    SELECT id FROM s
    """)

# ---- one-time codes and templates ----------------------------------------------------------------------------
# INSERT_OTP: a one-time code's nonce, hash and end of life.
INSERT_OTP = sa.text(
    "INSERT INTO otp_codes (notification_id, tenant_id, nonce, code_hash, expires_at) "
    "VALUES (:n, :t, :nonce, :h, :exp)")
# OTP_NONCE: a one-time code's nonce, by its message.
OTP_NONCE = sa.text("SELECT nonce FROM otp_codes WHERE notification_id = :n")
# OTP_FOR_CHECK: a tenant's one-time code, locked for a check.
OTP_FOR_CHECK = sa.text(
    "SELECT code_hash, expires_at, tries, verified_at FROM otp_codes WHERE tenant_id = :t "
    "AND notification_id = :n FOR UPDATE")
# OTP_TRIED: one more try on a one-time code, verified when it matched.
OTP_TRIED = sa.text("UPDATE otp_codes SET tries = tries + 1, verified_at = CASE WHEN :ok THEN now() END "
                    "WHERE notification_id = :n")
# NEWEST_TEMPLATE: a template's newest version for a channel.
NEWEST_TEMPLATE = sa.text(
    "SELECT version, body FROM templates WHERE name = :n AND :c = ANY(channels) ORDER BY version DESC LIMIT 1")
# KEEP_TEMPLATE_VERSION: the template version a row was rendered with, kept on the row.
KEEP_TEMPLATE_VERSION = sa.text("UPDATE notifications SET template_version = :v WHERE id = :id")

# ---- recipients ----------------------------------------------------------------------------------------------
RECIPIENT_COLUMNS = ("id, ref, display_name, email, phone, timezone, quiet_start, quiet_end, daily_cap, "
                     "opted_out_channels, created_at, updated_at")
# INSERT_RECIPIENT: a tenant's new recipient, answering its columns.
INSERT_RECIPIENT = sa.text(
    "INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, quiet_start, quiet_end, "
    "daily_cap, opted_out_channels) VALUES (:t, :ref, :display_name, :email, :phone, :timezone, "
    ":quiet_start, :quiet_end, :daily_cap, :opted_out_channels) "
    f"ON CONFLICT (tenant_id, ref) DO NOTHING RETURNING {RECIPIENT_COLUMNS}")
# RECIPIENT_ID_BY_REF: a recipient's id, by its ref.
RECIPIENT_ID_BY_REF = sa.text("SELECT id FROM recipients WHERE tenant_id = :t AND ref = :r")
# INSERT_RECIPIENT_CHANGE: one field change of a recipient, with who made it.
INSERT_RECIPIENT_CHANGE = sa.text(
    "INSERT INTO recipient_changes (tenant_id, recipient_id, actor_ref, field, old_value, new_value) "
    "VALUES (:t, :r, :a, :f, :o, :n)")
# GET_RECIPIENT: one of a tenant's recipients.
GET_RECIPIENT = sa.text(f"SELECT {RECIPIENT_COLUMNS} FROM recipients WHERE tenant_id = :t AND id = :i")
# LOCK_RECIPIENT: one of a tenant's recipients, locked for a change.
LOCK_RECIPIENT = sa.text(f"SELECT {RECIPIENT_COLUMNS} FROM recipients WHERE tenant_id = :t AND id = :i FOR UPDATE")
# RECIPIENT_CHANGES: a recipient's last 100 changes, newest first.
RECIPIENT_CHANGES = sa.text(
    "SELECT field, old_value, new_value, actor_ref, changed_at FROM recipient_changes "
    "WHERE recipient_id = :i ORDER BY id DESC LIMIT 100")
# FIND_BY_REF: the recipients with a ref, in one tenant or every tenant.
FIND_BY_REF = sa.text(
    "SELECT tenant_id, id FROM recipients WHERE ref = :r AND (CAST(:t AS int) IS NULL OR tenant_id = :t) "
    "ORDER BY tenant_id")
# LIST_RECIPIENTS: a keyset page of a tenant's recipients matching a query.
LIST_RECIPIENTS = sa.text(
    f"SELECT {RECIPIENT_COLUMNS} FROM recipients WHERE tenant_id = :t AND (ref ILIKE :q OR display_name ILIKE :q) "
    "AND (CAST(:b AS bigint) IS NULL OR id < :b) AND (CAST(:a AS bigint) IS NULL OR id > :a) "
    "ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -id ELSE id END LIMIT :l")


def update_recipient(fields: Iterable[str]) -> sa.TextClause:
    """SET each named field from the parameter of the same name (the caller names only editable fields)."""
    sets = ", ".join(f"{f} = :{f}" for f in fields)
    return sa.text(f"UPDATE recipients SET {sets}, updated_at = now() WHERE id = :i")

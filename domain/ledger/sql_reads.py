"""What the ledger's read models ask of the database, named in one place (the ledger's other statements are in
`sql.py`, metering's in `sql_metering.py`): the ledger page with its totals, the audit timeline, one message, and one
recipient's messages and reach. `NOTIFICATION_COLUMNS` is the read shape of a row every capability's views share
(public as `domain.ledger.views.NOTIFICATION_COLUMNS`).
"""

from __future__ import annotations

import sqlalchemy as sa

# The ledger's read shape of a row, shared by every capability's views (`views.NOTIFICATION_COLUMNS`).
NOTIFICATION_COLUMNS = (
    "n.id, n.tenant_id, n.recipient, n.channel, n.lane, n.template, n.status, n.suppressed_reason, n.review, "
    "n.provider_reference, n.cost_cents, n.attempts, n.last_error_class, n.event_id, n.order_id, n.job_id, "
    "n.created_at, n.sent_at, n.settled_at, n.next_attempt_at, n.reason_detail, "
    # What the receiver told the worker, as the worker recorded it: the effect reference (a webhook's 2xx
    # carries it) and the last answer (`already_processed` when a redelivery met an effect applied before).
    "CASE WHEN n.channel = 'webhook' THEN n.provider_reference END AS effect_ref, "
    "(SELECT a.outcome FROM notification_attempts a WHERE a.notification_id = n.id "
    "  ORDER BY a.attempt_no DESC LIMIT 1) AS last_outcome"
)
_LEDGER_WHERE = (
    "n.tenant_id = :t AND (CAST(:c AS text) IS NULL OR n.channel = :c) "
    "AND (CAST(:s AS text) IS NULL OR n.status = :s) AND (CAST(:r AS text) IS NULL OR n.recipient ILIKE :r) "
    "AND (CAST(:l AS text) IS NULL OR n.lane = :l) "
    "AND (CAST(:h AS int) IS NULL OR n.created_at > now() - make_interval(hours => CAST(:h AS int)))"
)
_FINAL = "n.status IN ('SENT','DELIVERED','FAILED')"
# Money as the balance saw it, per row: what it holds now (reserved while QUEUED, the charge once SENT) and what
# was given back (FAILED or SUPPRESSED after a reserve). A row that never reserved shows neither: nothing charged.
MONEY_COLUMNS = (
    "n.reserved_cents, (SELECT coalesce(sum(b.amount_cents), 0) FROM balance_entries b "
    "  WHERE b.notification_id = n.id AND b.kind = 'refund') AS refunded_cents"
)
_CHARGED = "coalesce(sum(n.reserved_cents) FILTER (WHERE n.status IN ('SENT','DELIVERED')), 0)"
# A keyset page: older than `:b` (or the newest), or just newer than `:a` (read oldest first, shown newest first).
_LEDGER_PAGE = (f"FROM notifications n WHERE {_LEDGER_WHERE} "
                "AND (CAST(:b AS bigint) IS NULL OR n.id < :b) AND (CAST(:a AS bigint) IS NULL OR n.id > :a) ")
# LEDGER_PAGE_OLDER: a keyset page of a tenant's ledger, older than a row.
LEDGER_PAGE_OLDER = sa.text(f"SELECT {NOTIFICATION_COLUMNS} {_LEDGER_PAGE}ORDER BY n.id DESC LIMIT :lim")
# LEDGER_PAGE_NEWER: a keyset page of a tenant's ledger, newer than a row.
LEDGER_PAGE_NEWER = sa.text(f"SELECT {NOTIFICATION_COLUMNS} {_LEDGER_PAGE}ORDER BY n.id ASC LIMIT :lim")
# LEDGER_MONEY_PAGE_OLDER: `LEDGER_PAGE_OLDER` with each row's money.
# The same pages with each row's money (the ledger page; the API and the export read the plain shape).
LEDGER_MONEY_PAGE_OLDER = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS}, {MONEY_COLUMNS} {_LEDGER_PAGE}ORDER BY n.id DESC LIMIT :lim")
# LEDGER_MONEY_PAGE_NEWER: `LEDGER_PAGE_NEWER` with each row's money.
LEDGER_MONEY_PAGE_NEWER = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS}, {MONEY_COLUMNS} {_LEDGER_PAGE}ORDER BY n.id ASC LIMIT :lim")
# LEDGER_TOTALS: a tenant's ledger totals: rows, money and delivery rate.
# Money: charged (held by SENT/DELIVERED rows), reserved (held by QUEUED rows) and refunded, apart. Delivery rate:
# delivered over what was attempted to the end (SENT, DELIVERED, FAILED); suppressed rows are counted apart.
LEDGER_TOTALS = sa.text(
    f"SELECT count(*) AS total, {_CHARGED} AS charged_cents, "
    "coalesce(sum(n.reserved_cents) FILTER (WHERE n.status = 'QUEUED'), 0) AS reserved_cents, "
    "(SELECT coalesce(sum(b.amount_cents), 0) FROM balance_entries b JOIN notifications n "
    f"  ON n.id = b.notification_id WHERE b.kind = 'refund' AND {_LEDGER_WHERE}) AS refunded_cents, "
    "count(*) FILTER (WHERE n.status = 'DELIVERED') AS delivered, "
    f"count(*) FILTER (WHERE {_FINAL}) AS attempted_final, "
    "count(*) FILTER (WHERE n.status = 'SUPPRESSED') AS suppressed, "
    "count(*) FILTER (WHERE n.status = 'FAILED') AS failed, "
    "count(*) FILTER (WHERE n.status = 'QUEUED') AS queued "
    f"FROM notifications n WHERE {_LEDGER_WHERE}")
# LEDGER_BY_CHANNEL: those totals by channel.
LEDGER_BY_CHANNEL = sa.text(
    "SELECT n.channel, count(*) AS total, "
    "count(*) FILTER (WHERE n.status = 'DELIVERED') AS delivered, "
    f"count(*) FILTER (WHERE {_FINAL}) AS attempted_final, "
    "count(*) FILTER (WHERE n.status = 'SUPPRESSED') AS suppressed, "
    "count(*) FILTER (WHERE n.status = 'FAILED') AS failed, "
    f"{_CHARGED} AS charged_cents "
    f"FROM notifications n WHERE {_LEDGER_WHERE} GROUP BY n.channel ORDER BY n.channel")
# AUDIT_NOTIFICATIONS: the rows an audit trail covers: by recipient refs or ids.
AUDIT_NOTIFICATIONS = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE n.tenant_id = :t AND "
    "(n.recipient = ANY(CAST(:refs AS text[])) OR n.id = ANY(CAST(:ids AS bigint[])) "
    "OR n.event_id = CAST(:ev AS uuid) OR n.order_id = CAST(:oid AS bigint)) "
    "ORDER BY n.id LIMIT 200")
# AUDIT_ORDER_EVENTS: an order's own events, in revision order.
# An order's own events: an order whose changes sent no message still has its history.
AUDIT_ORDER_EVENTS = sa.text(
    "SELECT event_id FROM outbox_events WHERE tenant_id = :t AND aggregate_type = 'order' "
    "AND aggregate_id = CAST(:oid AS text) ORDER BY aggregate_revision LIMIT 200")
# AUDIT_ATTEMPTS: the attempts of the audited rows.
AUDIT_ATTEMPTS = sa.text(
    "SELECT notification_id, attempt_no, worker, started_at, finished_at, outcome, status_code, "
    "error_class, latency_ms FROM notification_attempts WHERE notification_id = ANY(:ids)")
# AUDIT_EVENTS: the audited events, by id.
AUDIT_EVENTS = sa.text(
    "SELECT event_id, event_type, aggregate_id, aggregate_revision, occurred_at, request_id, actor_ref "
    "FROM outbox_events WHERE tenant_id = :t AND event_id = ANY(:e)")
# AUDIT_RECEIPTS: the receipts of the audited rows, by provider reference.
AUDIT_RECEIPTS = sa.text(
    "SELECT provider, provider_reference, outcome, received_at FROM delivery_receipts "
    "WHERE provider_reference = ANY(:r)")
# MESSAGE: one of a tenant's messages.
MESSAGE = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS}, n.dedupe_key, n.template_version, n.reserved_cents "
    "FROM notifications n WHERE n.tenant_id = :t AND n.id = :i")
# MESSAGE_ATTEMPTS: a message's attempts, in order.
MESSAGE_ATTEMPTS = sa.text(
    "SELECT attempt_no, started_at, finished_at, outcome, status_code, error_class, latency_ms, "
    "response_excerpt FROM notification_attempts WHERE notification_id = :i ORDER BY attempt_no")
# MESSAGE_RECEIPT: a message's newest receipt.
MESSAGE_RECEIPT = sa.text(
    "SELECT outcome, received_at FROM delivery_receipts WHERE provider_reference = :r AND provider = :c "
    "ORDER BY id DESC LIMIT 1")
# RECIPIENT_HEADER: a recipient's header on their page.
RECIPIENT_HEADER = sa.text("SELECT id, ref, display_name, timezone FROM recipients WHERE tenant_id = :t AND id = :i")
# RECIPIENT_MESSAGES: a recipient's messages, each with its last receipt.
RECIPIENT_MESSAGES = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS}, n.reserved_cents, "
    "(SELECT max(d.received_at) FROM delivery_receipts d WHERE d.provider_reference = n.provider_reference "
    "  AND d.provider = n.channel) AS receipt_at "
    "FROM notifications n WHERE n.tenant_id = :t AND n.recipient = :ref "
    "AND (CAST(:b AS bigint) IS NULL OR n.id < :b) ORDER BY n.id DESC LIMIT :l")
# RECIPIENT_REACH: how many messages reached a recipient today and this week, and on which channels.
RECIPIENT_REACH = sa.text(
    "SELECT count(*) FILTER (WHERE sent_at >= :day) AS today, "
    "count(*) FILTER (WHERE sent_at >= CAST(:now AS timestamptz) - interval '7 days') AS week, "
    "array_remove(array_agg(DISTINCT channel) FILTER (WHERE status = 'DELIVERED'), NULL) AS reached "
    "FROM notifications WHERE tenant_id = :t AND recipient = :ref AND status IN ('SENT', 'DELIVERED')")

"""Support's named SQL: every statement tenant-scoped by `:t`, which comes from the authenticated principal, never
from input. Written once here, used by search, the message page and the keyset pages."""

from __future__ import annotations

import sqlalchemy as sa

from domain.ledger.views import NOTIFICATION_COLUMNS

# RECIPIENTS: a tenant's recipients matching a query, and how each matched.
# Recipients by every reading of a query. Contact points are compared with what `recipients` already holds (digits
# only for phones, lower case for emails); nothing is written or kept.
RECIPIENTS = sa.text(
    """
    SELECT id, ref, display_name,
           CASE WHEN ref = :text THEN 'ref'
                WHEN CAST(:email AS text) <> '' AND lower(email) = :email THEN 'email'
                WHEN CAST(:phone AS text) <> '' AND regexp_replace(coalesce(phone, ''), '[^0-9]', '', 'g') = :phone
                  THEN 'phone'
                ELSE 'name' END AS matched_by
    FROM recipients
    WHERE tenant_id = :t AND (
          (CAST(:text AS text) <> '' AND ref = :text)
       OR (CAST(:email AS text) <> '' AND lower(email) = :email)
       OR (CAST(:phone AS text) <> '' AND regexp_replace(coalesce(phone, ''), '[^0-9]', '', 'g') = :phone)
       OR (CAST(:name AS text) <> '' AND display_name ILIKE :name_like))
    ORDER BY (ref = :text) DESC, id LIMIT :l
    """
)

# RECIPIENTS_BY_REFS: a tenant's recipients by their refs.
# The recipients behind refs a query led to (a message's, an order's customer, a lead's): one tenant's only.
RECIPIENTS_BY_REFS = sa.text("SELECT id, ref FROM recipients WHERE tenant_id = :t AND ref = ANY(:refs)")

# MESSAGES: a tenant's messages by id, job id, provider reference or event id, and how each matched.
MESSAGES = sa.text(
    f"""
    SELECT {NOTIFICATION_COLUMNS},
           CASE WHEN n.id = CAST(:mid AS bigint) THEN 'message id'
                WHEN n.provider_reference = :text THEN 'provider reference'
                WHEN n.event_id = CAST(:ev AS uuid) THEN 'event id'
                ELSE 'job id' END AS matched_by
    FROM notifications n
    WHERE n.tenant_id = :t AND (
          n.id = CAST(:mid AS bigint)
       OR (CAST(:text AS text) <> '' AND n.provider_reference = :text)
       OR (CAST(:text AS text) <> '' AND n.job_id = :text)
       OR n.event_id = CAST(:ev AS uuid))
    ORDER BY n.id DESC LIMIT :l
    """
)

# ORDER: a tenant's order by id, with its message count.
ORDER = sa.text(
    "SELECT o.id, o.status, o.revision, o.customer_ref, o.amount_cents, o.currency, o.updated_at, "
    "(SELECT count(*) FROM notifications n WHERE n.tenant_id = :t AND n.order_id = o.id) AS messages "
    "FROM orders o WHERE o.tenant_id = :t AND o.id = CAST(:oid AS bigint)")

# EVENT: a tenant's event by id.
EVENT = sa.text(
    "SELECT event_id, event_type, aggregate_type, aggregate_id, aggregate_revision, occurred_at, actor_ref "
    "FROM outbox_events WHERE tenant_id = :t AND event_id = CAST(:ev AS uuid)")

# LEADS_OF: a tenant's leads of some recipients.
LEADS_OF = sa.text(
    "SELECT id, recipient_ref, current_step FROM leads WHERE tenant_id = :t AND recipient_ref = ANY(:refs) "
    "ORDER BY id LIMIT 20")

# MESSAGE: one of a tenant's messages, everything about it.
MESSAGE = sa.text(
    f"""
    SELECT {NOTIFICATION_COLUMNS}, n.dedupe_key, n.template_version, n.reserved_cents, n.payload, n.campaign_id,
           n.intent_id, n.max_attempts, n.replayed_at,
           (SELECT r.id FROM recipients r WHERE r.tenant_id = n.tenant_id AND r.ref = n.recipient) AS recipient_id,
           (SELECT r.display_name FROM recipients r WHERE r.tenant_id = n.tenant_id AND r.ref = n.recipient)
             AS recipient_name,
           (SELECT i.lead_id FROM lead_notification_intents i WHERE i.id = n.intent_id) AS lead_id,
           (SELECT c.name FROM campaigns c WHERE c.id = n.campaign_id) AS campaign_name
    FROM notifications n WHERE n.tenant_id = :t AND n.id = :i
    """
)

# TEMPLATE_BODY: the text of one template version.
# The text of the template version a message was rendered with at send time (the row keeps the version).
TEMPLATE_BODY = sa.text("SELECT body FROM templates WHERE name = :n AND version = :v")

# ATTEMPTS: a message's attempts, in its own month.
# The message's own month (`:c`, its created_at) prunes the partitioned attempts to one partition.
ATTEMPTS = sa.text(
    "SELECT attempt_no, worker, started_at, finished_at, outcome, status_code, error_class, latency_ms, "
    "response_excerpt, next_attempt_at FROM notification_attempts WHERE notification_id = :i "
    "AND notification_created_at = :c ORDER BY attempt_no, id")

# RECEIPTS: a message's receipts.
RECEIPTS = sa.text(
    "SELECT provider, outcome, received_at, applied_at FROM delivery_receipts "
    "WHERE provider_reference = :r AND provider = :c ORDER BY id")

# MONEY: a message's balance entries.
MONEY = sa.text(
    "SELECT kind, amount_cents, reason, created_at FROM balance_entries "
    "WHERE tenant_id = :t AND notification_id = :i ORDER BY id")

# ENVELOPE: an event's envelope, with its digest.
ENVELOPE = sa.text(
    "SELECT event_id, aggregate_type, aggregate_id, aggregate_revision, event_type, schema_version, occurred_at, "
    "request_id, causation_id, actor_ref, payload, digest FROM outbox_events WHERE tenant_id = :t AND event_id = :e")

# CAMPAIGN_MESSAGES: a campaign's messages, a keyset page (newest first; `:a`: the page just newer, oldest first).
CAMPAIGN_MESSAGES = sa.text(
    f"""
    SELECT {NOTIFICATION_COLUMNS} FROM notifications n
    WHERE n.tenant_id = :t AND n.campaign_id = :c
      AND (CAST(:b AS bigint) IS NULL OR n.id < :b) AND (CAST(:a AS bigint) IS NULL OR n.id > :a)
    ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -n.id ELSE n.id END LIMIT :l
    """
)

# LEADS: leads by their ref (the applicant's recipient ref) or their advisor's ref, exactly.
LEADS = sa.text(
    "SELECT id, recipient_ref, advisor_ref, current_step, "
    "CASE WHEN recipient_ref = :text THEN 'lead ref' ELSE 'advisor ref' END AS matched_by "
    "FROM leads WHERE tenant_id = :t AND CAST(:text AS text) <> '' "
    "AND (recipient_ref = :text OR advisor_ref = :text) ORDER BY id DESC LIMIT :l")

# CAMPAIGNS: campaigns by id (a bare number) or by part of their name.
CAMPAIGNS = sa.text(
    "SELECT id, name, status, segment, template, channel, total, "
    "CASE WHEN id = CAST(:cid AS bigint) THEN 'campaign id' ELSE 'campaign name' END AS matched_by "
    "FROM campaigns WHERE tenant_id = :t AND (id = CAST(:cid AS bigint) "
    "OR (CAST(:name AS text) <> '' AND name ILIKE :name_like)) "
    "ORDER BY (id = CAST(:cid AS bigint)) DESC NULLS LAST, id DESC LIMIT :l")

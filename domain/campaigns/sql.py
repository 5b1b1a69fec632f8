"""What campaigns ask of the database, named in one place. A segment is an SQL condition over `recipients r`
(`segments`), so the statements that select people take it as their one argument. The ledger rows themselves are
written by `domain.ledger.write` (`ledger_audience_batch` in, `settle_unsent_where` out), never here.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

# The column of `recipients r` that holds a channel's contact point.
CONTACT_COLUMN: Final[dict[str, str]] = {"email": "r.email", "sms": "r.phone", "whatsapp": "r.phone"}
# The segments' conditions over `recipients r` (`{contact}`: the channel's contact column; `:channel` its name).
# Reachable: a contact point for the channel, and not opted out of it.
_REACHABLE = "{contact} IS NOT NULL AND NOT (:channel = ANY(r.opted_out_channels))"
# Stopped at the credit check: a lead of theirs is at `credit_check_done` with no live nudge left (sent or ended).
_STOPPED_AT_CREDIT_CHECK = (
    " AND EXISTS (SELECT 1 FROM leads l WHERE l.tenant_id = r.tenant_id "
    "AND l.recipient_ref = r.ref AND l.current_step = 'credit_check_done' AND NOT EXISTS ("
    "SELECT 1 FROM lead_notification_intents i WHERE i.lead_id = l.id AND i.status IN ('pending', 'scheduled')))")
SEGMENT_CONDITIONS: Final[dict[str, str]] = {
    "all_reachable": _REACHABLE,
    "abandoned_after_credit_check": _REACHABLE + _STOPPED_AT_CREDIT_CHECK,
}


def segment_condition(segment: str, channel: str) -> str:
    """A segment's condition for one channel (a KeyError for a channel without a contact column)."""
    return SEGMENT_CONDITIONS[segment].format(contact=CONTACT_COLUMN[channel])


def count_audience(audience: str) -> sa.TextClause:
    return sa.text(f"SELECT count(*) FROM recipients r WHERE r.tenant_id = :t AND {audience}")


def audience_refs(audience: str) -> sa.TextClause:
    return sa.text(f"SELECT r.ref FROM recipients r WHERE r.tenant_id = :t AND {audience} ORDER BY r.id")


# CHANNEL_PRICE: what one message of a channel costs a tenant now.
# What one message of the channel costs the tenant now (the preview's estimate; the ledger prices each row itself).
CHANNEL_PRICE = sa.text(
    "SELECT coalesce((SELECT price_cents FROM channel_prices WHERE tenant_id = :t "
    "AND channel = CAST(:c AS varchar)), 0)")
# INSERT_CAMPAIGN: a new campaign, ledgering from its first recipient.
INSERT_CAMPAIGN = sa.text(
    "INSERT INTO campaigns (tenant_id, name, segment, template, channel, status, total, ledgered, "
    "last_recipient_id, actor_ref, started_at) VALUES (:t, :n, :s, :tpl, :c, 'ledgering', :total, 0, 0, :a, "
    "now()) RETURNING id")
# LOCK_CAMPAIGN: a campaign locked for its fan-out's next batch.
LOCK_CAMPAIGN = sa.text(
    "SELECT id, tenant_id, name, segment, template, channel, status, last_recipient_id FROM campaigns "
    "WHERE id = :i FOR UPDATE")
# ADVANCE: a campaign's fan-out moved past a batch of recipients (running once it is done).
ADVANCE = sa.text(
    "UPDATE campaigns SET ledgered = ledgered + :k, last_recipient_id = coalesce(:last, last_recipient_id), "
    "status = CASE WHEN :done THEN 'running' ELSE status END WHERE id = :i")
# UNFINISHED: the campaigns whose fan-out has not finished ledgering.
UNFINISHED = sa.text("SELECT id FROM campaigns WHERE status = 'ledgering' ORDER BY id")
# CANCEL: a tenant's campaign cancelled unless it is done, with the status it had.
# A campaign whose fan-out is over and of which nothing is owed any more is done (views computes that on read):
# cancelling it changes nothing.
# The status it had (`was`) beside the one it has now: a cancel that changed nothing is not audited.
CANCEL = sa.text(
    "WITH was AS (SELECT id, status FROM campaigns WHERE tenant_id = :t AND id = :i FOR UPDATE) "
    "UPDATE campaigns c SET status = CASE WHEN c.status = 'ledgering' OR (c.status = 'running' AND EXISTS ("
    "  SELECT 1 FROM notifications n WHERE n.campaign_id = c.id AND n.status = 'QUEUED')) THEN 'cancelled' "
    "ELSE c.status END FROM was WHERE c.id = was.id RETURNING c.id, was.status AS was, c.status")

# CAMPAIGNS: a tenant's campaigns with their counts and suppressions by reason.
# One pass for the whole list: each campaign with its counts and its suppressions by reason (most first).
CAMPAIGNS = sa.text(
    """
    SELECT c.id, c.name, c.segment, c.template, c.channel, c.status, c.total, c.ledgered, c.created_at,
           c.started_at, c.finished_at, k.queued, k.deferred, k.sent, k.delivered, k.failed, k.last_settled,
           s.suppressed
    FROM campaigns c
    CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE status = 'QUEUED' AND reason_detail IS NULL) AS queued,
             count(*) FILTER (WHERE status = 'QUEUED' AND reason_detail IS NOT NULL) AS deferred,
             count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED')) AS sent,
             count(*) FILTER (WHERE status = 'DELIVERED') AS delivered,
             count(*) FILTER (WHERE status = 'FAILED') AS failed,
             max(coalesce(settled_at, sent_at)) AS last_settled
      FROM notifications WHERE campaign_id = c.id) k
    CROSS JOIN LATERAL (
      SELECT json_object_agg(reason, n ORDER BY n DESC) AS suppressed
      FROM (SELECT suppressed_reason AS reason, count(*) AS n FROM notifications
            WHERE campaign_id = c.id AND status = 'SUPPRESSED' GROUP BY suppressed_reason) r) s
    WHERE c.tenant_id = :t AND (CAST(:i AS bigint) IS NULL OR c.id = :i)
      AND (CAST(:ch AS text) IS NULL OR c.channel = :ch)
      AND (CAST(:b AS bigint) IS NULL OR c.id < :b) AND (CAST(:a AS bigint) IS NULL OR c.id > :a)
    ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -c.id ELSE c.id END LIMIT :l
    """
)

"""What journeys ask of the database, named in one place: leads, their events and their nudges (intents). The
messages a nudge owes are written and settled through `domain.ledger.write`, never here.
"""

from __future__ import annotations

import sqlalchemy as sa

from domain.ledger.views import NOTIFICATION_COLUMNS
from domain.models import LeadNotificationIntent, table_of

INTENTS = table_of(LeadNotificationIntent)
LIVE = ("pending", "scheduled")

# ---- applying an event ---------------------------------------------------------------------------------------
# READ_LEAD: a tenant's lead, with its current step.
READ_LEAD = sa.text(
    "SELECT id, recipient_ref, advisor_ref, current_step, last_step_at FROM leads WHERE tenant_id = :t AND id = :l")
# RECORD_EVENT: a lead event recorded once by its id (nothing back: a duplicate).
# The event is recorded first: a concurrent duplicate waits on this row and then reads our answer.
RECORD_EVENT = sa.text(
    "INSERT INTO lead_events (tenant_id, lead_id, event_id, event, occurred_at) VALUES (:t, :l, :e, :ev, :o) "
    "ON CONFLICT (tenant_id, event_id) DO NOTHING RETURNING id")
# PRIOR_ANSWER: the answer kept for a lead event already recorded.
PRIOR_ANSWER = sa.text("SELECT lead_id, answer FROM lead_events WHERE tenant_id = :t AND event_id = :e")
# KEEP_ANSWER: a lead event's outcome and answer kept.
KEEP_ANSWER = sa.text(
    "UPDATE lead_events SET outcome = :o, answer = CAST(:a AS jsonb), applied_at = clock_timestamp() WHERE id = :i")
# MOVE_LEAD: a lead moved to its new step, if nobody moved it since it was read.
# The optimistic guard: the lead moves only if nobody moved it since we read it (NULL `:at`: kept).
MOVE_LEAD = sa.text(
    "UPDATE leads SET current_step = :new, last_step_at = greatest(last_step_at, CAST(:at AS timestamptz)) "
    "WHERE id = :l "
    "AND current_step IS NOT DISTINCT FROM CAST(:old AS varchar) RETURNING id")


def live_intents(lead_id: int) -> sa.Select[tuple[int]]:
    """The lead's live nudges, as a SELECT the ledger's many-row settle judges inside its one UPDATE."""
    return sa.select(INTENTS.c.id).where(INTENTS.c.lead_id == lead_id, INTENTS.c.status.in_(LIVE))


# CANCEL_LIVE_INTENTS: a lead's live nudge intents cancelled, with why.
CANCEL_LIVE_INTENTS = sa.text(
    "UPDATE lead_notification_intents SET status = 'cancelled', updated_at = now(), "
    "final_reason = :why WHERE lead_id = :l AND status IN ('pending', 'scheduled') RETURNING id")
# INSERT_INTENT: a new nudge intent, answering its id.
INSERT_INTENT = sa.insert(INTENTS).returning(INTENTS.c.id)
# INSERT_LEAD: a new lead, answering its id.
INSERT_LEAD = sa.text("INSERT INTO leads (tenant_id, recipient_ref, advisor_ref) VALUES (:t, :r, :a) RETURNING id")

# ---- views ---------------------------------------------------------------------------------------------------
# LIST_LEADS: a tenant's leads with their live nudge.
LIST_LEADS = sa.text(
    "SELECT l.id, l.recipient_ref, l.advisor_ref, l.current_step, i.step AS live_step, "
    "i.status AS live_status, i.scheduled_for AS live_scheduled_for, "
    "(SELECT count(*) FROM lead_notification_intents h WHERE h.lead_id = l.id) AS intents "
    "FROM leads l LEFT JOIN lead_notification_intents i ON i.lead_id = l.id "
    "AND i.status IN ('pending', 'scheduled') WHERE l.tenant_id = :t "
    "AND (CAST(:q AS text) IS NULL OR l.recipient_ref ILIKE :q OR l.advisor_ref ILIKE :q) "
    "AND (CAST(:step AS text) IS NULL OR l.current_step = :step "
    "OR (CAST(:step AS text) = 'none' AND l.current_step IS NULL)) "
    "AND (CAST(:b AS bigint) IS NULL OR l.id < :b) AND (CAST(:a AS bigint) IS NULL OR l.id > :a) "
    "ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -l.id ELSE l.id END LIMIT :lim")
# LEAD_INTENTS: a lead's nudge intents, oldest first.
LEAD_INTENTS = sa.text(
    "SELECT id, step, status, scheduled_for, final_reason, created_at, updated_at "
    "FROM lead_notification_intents WHERE lead_id = :l ORDER BY id")
# LEAD_MESSAGES: the nudges' messages and the lead's lifecycle messages (their dedupe keys name the lead).
LEAD_MESSAGES = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS}, n.intent_id FROM notifications n WHERE n.tenant_id = :t AND "
    "(n.intent_id IN (SELECT id FROM lead_notification_intents WHERE lead_id = :l) "
    " OR n.dedupe_key LIKE :lifecycle) ORDER BY n.id")
# LEAD_EVENTS: a lead's events, newest first.
LEAD_EVENTS = sa.text(
    "SELECT event_id, event, occurred_at, received_at, outcome, answer->>'reason' AS reason "
    "FROM lead_events WHERE lead_id = :l ORDER BY id DESC LIMIT 200")

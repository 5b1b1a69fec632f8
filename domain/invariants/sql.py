"""The invariants' named SQL: each of ARCHITECTURE.md's invariants as one statement returning 0 when it holds, and
how often the fence worked."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

# ---- invariants (ARCHITECTURE.md): each must return 0 -----------------------------------------------------------
# INVARIANTS: each invariant's query by name: every one must count 0.
# Invariant 4 (one effect per event id and effect type) lives at the receiver: we never read its tables; `outbox
# check` asks its HTTP API.
INVARIANTS: Final[dict[str, str]] = {
    "1 committed revision without outbox event": """
        SELECT count(*) FROM orders o
        CROSS JOIN LATERAL generate_series(o.base_revision + 1, o.revision) AS r(rev)
        WHERE NOT EXISTS (
          SELECT 1 FROM outbox_events e WHERE e.tenant_id = o.tenant_id AND e.aggregate_type = 'order'
            AND e.aggregate_id = o.id::text AND e.aggregate_revision = r.rev)
    """,
    "2 outbox event for a revision never committed": """
        SELECT count(*) FROM outbox_events e
        LEFT JOIN orders o ON o.tenant_id = e.tenant_id AND o.id::text = e.aggregate_id
        WHERE e.aggregate_type = 'order'
          AND (o.id IS NULL OR e.aggregate_revision > o.revision OR e.aggregate_revision <= o.base_revision)
    """,
    "3 two live intents for one lead": """
        SELECT count(*) FROM (SELECT lead_id FROM lead_notification_intents
          WHERE status IN ('pending','scheduled') GROUP BY lead_id HAVING count(*) > 1) x
    """,
    "5 sent without its charge, a message's entries not matching what it holds, or a negative balance": """
        SELECT (SELECT count(*) FROM notifications n
                WHERE n.status IN ('SENT','DELIVERED') AND n.cost_cents > 0 AND n.reserved_cents <> n.cost_cents)
             + (SELECT count(*) FROM notifications n
                WHERE n.reserved_cents <> -coalesce((SELECT sum(b.amount_cents) FROM balance_entries b
                                                      WHERE b.notification_id = n.id), 0))
             + (SELECT count(*) FROM balances WHERE balance_cents < 0)
    """,
    "6 suppressed without a reason": """
        SELECT count(*) FROM notifications WHERE status = 'SUPPRESSED' AND suppressed_reason IS NULL
    """,
    "7 a tenant whose balance entries do not sum to its balance": """
        SELECT count(*) FROM balances b
        WHERE b.balance_cents <> coalesce((SELECT sum(e.amount_cents) FROM balance_entries e
                                          WHERE e.tenant_id = b.tenant_id), 0)
    """,
    # What a message holds, by its status: a sent one its price (never refunded), an unsent one nothing.
    "8 a sent message refunded, or an unsent message still charged": """
        SELECT count(*) FROM notifications n
        WHERE (n.status IN ('SENT','DELIVERED') AND n.reserved_cents <> n.cost_cents AND n.cost_cents > 0)
           OR (n.status IN ('FAILED','SUPPRESSED') AND (n.reserved_cents <> 0 OR n.cap_day IS NOT NULL))
    """,
    # An attempt the other side accepted (2xx) is the truth: its row says sent (or, after a provider's `failed`
    # receipt, undeliverable), unless an operator replayed the row after that attempt — a replay gives the row a
    # new identity, so what it says afterwards (owed, failed again, or suppressed: a campaign cancelled, an
    # opt-out) is about the new one. Only a row the provider bounced can be replayed with an accepted attempt
    # behind it legitimately: one replayed with no `failed` receipt since that attempt was an accepted send the
    # row had marked failed (the very bug this checks), and a replay must not hide it. A stale answer (about an
    # identity the row no longer has, or a message the provider bounced since) is old news, not a send.
    "9 an accepted attempt whose message says it was never sent": """
        SELECT count(DISTINCT a.notification_id) FROM notification_attempts a
        JOIN notifications n ON n.id = a.notification_id
        WHERE a.status_code BETWEEN 200 AND 299 AND a.outcome <> 'stale'
          AND (n.replayed_at IS NULL OR a.finished_at > n.replayed_at
               OR NOT EXISTS (SELECT 1 FROM delivery_receipts r
                              WHERE r.notification_id = a.notification_id AND r.outcome = 'failed'
                                AND r.applied_at >= a.started_at))
          AND (n.status IN ('SUPPRESSED', 'QUEUED')
               OR (n.status = 'FAILED' AND n.last_error_class IS DISTINCT FROM 'undeliverable'))
    """,
    # A person's daily count is exactly the messages holding a slot of that day: a slot is taken and given back
    # with the row that holds it (a refund, a late truth, a retry on a later day).
    "11 a daily cap count that does not match the messages holding its slots": """
        SELECT count(*) FROM recipient_daily_counts d
        FULL JOIN (SELECT tenant_id, recipient, cap_day AS day, count(*) AS n FROM notifications
                   WHERE cap_day IS NOT NULL GROUP BY 1, 2, 3) h USING (tenant_id, recipient, day)
        WHERE coalesce(d.taken, 0) <> coalesce(h.n, 0)
    """,
    # The attempts are partitioned by their message's month: each line's partition key is its message's creation
    # time (archive drops a month of attempts together with the month of messages it describes). It also holds
    # what the attempts' foreign key held before the ledger was partitioned (migration 0028 says why it went):
    # every attempt's message is in the ledger.
    "12 an attempt filed under another month than its message's, or with no message": """
        SELECT count(*) FROM notification_attempts a
        WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = a.notification_id
                          AND n.created_at = a.notification_created_at)
    """,
    # Receipts are partitioned by month; each receipt id is kept once, in any month, by its key.
    "13 a receipt whose id is not kept once": """
        SELECT count(*) FROM delivery_receipts r
        WHERE NOT EXISTS (SELECT 1 FROM delivery_receipt_keys k WHERE k.receipt_id = r.receipt_id
                          AND k.received_at = r.received_at)
    """,
    # A receipt waits (`applied_at` NULL) only while its message is owed: whatever settles a message settles the
    # receipts pending on it in the same transaction (domain/ledger/write.py `settle_receipts`). One left pending
    # on a row that can no longer change would wait for ever (and the money it means with it). A receipt no
    # message was found for is kept for support, never applied: not counted.
    "14 a receipt pending on a settled row": """
        SELECT count(*) FROM delivery_receipts r JOIN notifications n ON n.id = r.notification_id
        WHERE r.applied_at IS NULL AND r.notification_id IS NOT NULL AND n.status <> 'QUEUED'
    """,
    # The ledger is partitioned by month; each message's dedupe key is kept once, in any month, by its key (the
    # ledger's ways in write both in one statement; migration 0028's trigger keeps it for any other writer).
    "15 a message whose dedupe key is not kept for it": """
        SELECT count(*) FROM notifications n
        WHERE NOT EXISTS (SELECT 1 FROM ledger_keys k WHERE k.dedupe_key = n.dedupe_key
                          AND k.notification_id = n.id AND k.created_at = n.created_at)
    """,
    # What the foreign keys into the ledger said before it was partitioned: a balance entry names a message once
    # ledgered (its key is kept after its month is archived: money history outlives the month), and a one-time
    # code belongs to a message still here (codes leave with their month).
    "16 a balance entry or a code naming a message never ledgered": """
        SELECT (SELECT count(*) FROM balance_entries b WHERE b.notification_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM ledger_keys k WHERE k.notification_id = b.notification_id))
             + (SELECT count(*) FROM otp_codes o
                WHERE NOT EXISTS (SELECT 1 FROM notifications n WHERE n.id = o.notification_id))
    """,
    "10 a live nudge with no message left owed (a phantom intent)": """
        SELECT count(*) FROM lead_notification_intents i
        WHERE i.status IN ('pending','scheduled')
          AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.intent_id = i.id AND n.status = 'QUEUED')
    """,
}

# FENCE_OUTCOMES: how often the fence worked: late truths and stale writes, by outcome.
# How often the fence worked: late truths recorded (`late_accept`) and stale writes refused (`stale`), by outcome.
FENCE_OUTCOMES = sa.text(
    "SELECT outcome, count(*) AS n FROM notification_attempts WHERE outcome IN ('late_accept', 'stale') "
    "GROUP BY outcome")
# INVARIANT_STATEMENTS: each invariant's statement, ready to run (by its name).
INVARIANT_STATEMENTS: Final[dict[str, sa.TextClause]] = {name: sa.text(q) for name, q in INVARIANTS.items()}

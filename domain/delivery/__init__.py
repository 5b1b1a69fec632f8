"""Delivery: from an owed ledger row to its recorded attempt. One line per module:

- `queue` — the lanes' vocabulary: queue names, wake channels, job ids, the Redis keys of the buckets.
- `wakeups` — after-commit wake-ups, the relay's scan of owed rows, the order pages' refresh messages.
- `fair_queue` — `fair_plan` applied: the relay's bulk window read flow by flow, each wake-up scored by fair queueing.
- `fair_plan` — pure: each (tenant, campaign) flow's share of the bulk window and its gap, a capped tenant's pace.
- `ratelimit` — the token buckets in Redis (a channel's, a tenant's), one script call per take.
- `plan` — pure: a claim's types (`Claim`, `Ready`, `Suppressed`, …) and `plan`, the common-case decision.
- `store` — the workers' one store: claim and record on an async psycopg pool, one row at a time, the long way
  in the same transaction (`domain.db.run_sync`).
- `store_batch` — the same store a batch at a time: N rows claimed in one statement, their answers in one record.
- `long_way` — the long way of a claim and a record, on a unit of work: suppress, defer, caps, breaker, late truth.
- `sql` — the claim's named statements: the lease, the take, the long way's settlements before a send.
- `sql_record` — the record's statements, and the receipts'.
- `sql_review` — the operators' statements: lanes paused and resumed, rows replayed or resolved.
- `sql_reads` — the read models' statements: what holds an owed row, the relay's scan, /ops, /metrics.
- `retry` — pure: an attempt's outcome classified, retry or fail decided.
- `circuit` — a tenant endpoint's breaker: its state read at claim, moved by each answer.
- `receipts` — provider delivery receipts, applied now or kept for a row still owed.
- `review` — failed rows replayed or resolved by an operator.
- `lanes` — a lane paused and resumed, durably.
- `signing` — the system receiver's webhook signature.
- `priority` — a lane's PostgreSQL backends at its worker's CPU priority.
- `state` — what holds an owed row, in plain words (the message page).
- `views` — the operations read models (/ops).
- `telemetry` — what /metrics reads from the ledger.

A row ends through the ledger's `settle_unsent` / `accept_truth` (`domain.ledger.write`).
"""

"""Support's read room: it reads the ledger, orders, journeys and campaigns, writes nothing, and nothing leans on
it. One line per module:

- `query` — pure: what a query can be (ref, name, phone, email, message id, job id, reference, event id, order).
- `search` — find anything by anything.
- `message` — one message with its attempts, money, receipt and redacted envelope.
- `export` — a filtered ledger as CSV.
- `ledger` — the ledger's reads, with each queued row's state.
- `pages` — keyset pages of every list, never an OFFSET.
- `sql` — their statements.
"""

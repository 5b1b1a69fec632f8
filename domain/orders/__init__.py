"""Orders. One line per module:

- `policy` — pure: the transition policy.
- `commands` — an order change, its outbox event and its ledger rows in one commit.
- `envelope` — the event envelope.
- `audience` — pure: who hears about which event.
- `trial` — a test event to one webhook endpoint, the way order events go.
- `views` — read models.
- `sql` — their statements.
"""

"""Helpers the test modules share (a test module imports helpers from here, never from another test module).

- `browser`: the operator pages in a real browser: an order opened, a fresh order, a text, the layout.
- `campaigns`: many reachable people, and an email campaign fanned out to them.
- `cli`: the `outbox` command run as a real process.
- `db`: one value from a query; every invariant of `outbox check` holding.
- `endpoints`: a tenant's webhook endpoints created, their rows, a public URL only matched.
- `ledger`: a recipient and a send through the API; a balance moved with an adjustment entry.
- `long_way`: a claim taken and answered the long way, and the row and balance entries it leaves.
- `orders`: order approves (as authorized, or set back to authorized first) and a tenant's authorized orders.
- `people`: a person of tenant 42, an SMS ledgered to them, a fanned-out campaign's first row.
- `retention`: rows of a long-settled month carrying what an archive must never hold; a digest of its tables.
- `review`: a message that really failed; the operator actions recorded about rows.
- `threads`: calls started together on threads, each answer (or exception) in order.
"""

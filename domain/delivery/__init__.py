"""Delivery, by responsibility: the queue vocabulary (`queue`), after-commit wake-ups and the relay's scan
(`wakeups`), `claims` (claim, send-time floor rules, record), the pure retry decision (`retry`), `receipts` (provider
delivery receipts), `review` (replay and resolve of failed rows), `lanes` (durable pause and resume), token buckets
(`ratelimit`), webhook signatures (`signing`), operations read models (`views`), what holds an owed row (`state`). A row ends through the ledger's
`settle_unsent` / `accept_truth` (`domain.ledger.write`)."""

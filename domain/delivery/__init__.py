"""Delivery, by responsibility: `claims` (claim, send-time floor rules, record), `receipts` (provider delivery
receipts), `review` (replay and resolve of failed rows), `lanes` (durable pause and resume)."""

"""Campaigns on the bulk lane. One line per module:

- `segments` — named segments, code not templates (their conditions are named in `sql`).
- `fan_out` — a campaign ledgered in idempotent batches, and cancelled.
- `views` — progress.
- `sql` — their statements and the segments' conditions.
"""

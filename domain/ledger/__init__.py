"""The ledger. One line per module:

- `write` — the one way in and the ways out.
- `send` — the send API's way in (one message checked, then written through `write`).
- `owed` — what a new row owes the runtime: ids only (`OwedRow`).
- `render` — a template rendered with a message's data: at send time, and masked for the message page.
- `templates` — templates rendered at send time, the version kept on the row.
- `metering` — exact metering and the default prices.
- `recipients` — recipients and their change log.
- `otp` — one-time codes.
- `floor` — pure: the floor rules no template or campaign can break.
- `reasons` — plain-words reasons.
- `views` — read models.
- `sql` — its statements, named (the way in and out, recipients, one-time codes, templates).
- `sql_metering` — metering's statements.
- `sql_reads` — the read models' statements.
"""

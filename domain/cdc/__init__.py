"""Change-data capture of the outbox (published to a Redis Stream by `jobs/cdc.py`). One line per module:

- `slot` — the logical replication slot on `outbox_events` (wal2json) checked, created, peeked, advanced, measured.
- `message` — pure: wal2json's rows grouped into committed transactions, mapped onto Debezium's outbox router fields.
- `views` — the slot's state for /ops.
- `sql` — their statements.
"""

"""Change-data capture of the outbox: a logical replication slot on `outbox_events` decoded by wal2json, read by
polling the slot with SQL (`slot.py`), each committed event mapped one-to-one onto Debezium's outbox event router
fields (`message.py`, pure), published to a Redis Stream by `jobs/cdc.py`. The statements live in `sql.py`."""

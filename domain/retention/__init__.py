"""Retention: the ledger's history by month (docs/scaling.md "Partitions and retention"). One line per module:

- `months` — pure: months and partition names.
- `partitions` — partitions kept ahead, rows moved out of a DEFAULT partition.
- `archive` — a settled month written to a redacted file, then detached and dropped (refused while any is owed).
- `prune` — retention of what is not partitioned.
- `sql` — their statements.
"""

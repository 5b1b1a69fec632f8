"""Retention: the ledger's history by month (partitions created ahead, a settled month archived to a redacted file
and dropped) and the pruning of what is not partitioned. docs/scaling.md "Partitions and retention"."""

"""Campaigns on the bulk lane: named segments (`segments`), fan-out into the ledger and cancel (`fan_out`), progress
(`views`)."""

"""The mock outside world: a customer webhook endpoint with its own effect ledger, and channel providers."""

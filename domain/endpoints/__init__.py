"""Webhook endpoints per tenant (Svix's model). One line per module:

- `urls` — the SSRF guard: loopback, private, link-local and metadata addresses refused, again after DNS at send.
- `store` — endpoints and their secrets (a 24 h rotation overlap), the fan-out's targets, health from the attempts.
- `signing` — one signature header signed by every live secret.
- `breaker` — pure: the circuit breaker's decision (run at claim and record by `domain/delivery/circuit.py`).
- `mock` — development only: an endpoint pointed at the mock receiver hands it its secret.
- `sql` — their statements.
"""

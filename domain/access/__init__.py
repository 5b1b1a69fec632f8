"""Access: who may do what. One line per module:

- `auth` — operators, passwords, API keys and the login throttle.
- `apikeys` — API keys listed and revoked.
- `idempotency` — `Idempotency-Key` claims and their stored answers.
- `roles` — the one table of roles.
- `actions` — the privileged-action log.
- `peers` — whose address a request is counted under behind trusted proxies.
- `sessions` — the dashboard's cookie sessions: a one-time ticket spent for an HttpOnly cookie, hashed at rest.
- `sql` — their statements.
"""

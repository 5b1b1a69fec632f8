"""Running the system around the runtime (the runtime never imports this). One line per module:

- `demo` — the demo and `outbox up`: migrate, seed, start and keep every process running.
- `procs` — process supervision.
- `scaled` — past one process of each: nginx before N dashboard backends, N relays and workers per lane.
- `pgbouncer` — PgBouncer in transaction mode before the pools.
- `dbadmin` — database admin.
- `seed` — the demo data and its operators.
- `checks` — the invariant checks.
- `browser` — an operator logged in through the real login page, for the browser-driving tools.
"""

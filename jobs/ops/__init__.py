"""Running the system around the runtime: process supervision (`outbox up`), database admin, the demo data and
the invariant checks. The runtime (worker, relay) never imports this."""

"""Drills against a whole running system, each in its own database (nothing in the runtime or the supervisor
imports them). One line per module or package:

- `scenario` — the scenario transcript.
- `bench/` — `outbox bench`: one module per step, the evidence in `report`.
- `storm` — the journey storm.
- `chaos/` — chaos while it runs, and the CDC profile.
- `vacuum` — VACUUM held back.
- `replica` — a replica promotion: the run and its measures.
- `replica_pg` — the primary, its standby and the receiver's cluster.
- `replica_report` — the replica drill's evidence.
"""

"""`outbox chaos --duration S --seed N`: the whole system under steady load while seeded faults hit it.

It owns everything it runs, next to the demo and a test run: a PostgreSQL cluster in a temporary directory of its own
(initdb + pg_ctl, as the `postgres` user when run as root: the checkout may sit where that user cannot reach; removed
afterwards, its log kept in `.run/chaos-logs/postgres.log`), its own Redis server, the receiver, the HTTP API (the
dashboard's backend for /api/v1; the Reflex build is too slow to restart inside a short run), the relay and two workers
per lane (one critical), each on a free port. Load goes through the API: order approvals, sends, one-time codes, lead
events, and one campaign. At times drawn from `random.Random(seed)` it SIGKILLs a worker, the relay, the receiver and
the API (restarting each shortly after), SIGSTOPs a worker past its lease and resumes it, FLUSHALLs Redis, turns on the
receiver's fault switches for a few seconds (webhooks slower than a lease, 503s, effects applied with the answer lost)
and restarts PostgreSQL. Then it stops the load, drains (with a deadline) and counts:

- lost: an accepted request or committed row whose message never happened (still owed after the drain, FAILED,
  missing, a webhook with no receiver effect, a "sent" message the provider never received);
- duplicate_effects: more than one receiver effect for one (event_id, effect_type);
- invariants_broken: every `outbox check` invariant, the receiver's included (unchecked counts as broken);
- money_mismatch: balances vs their entries, sent rows vs their charge, unsent rows still charged;
- restart_recovery_s: from PostgreSQL accepting connections again until steady delivery (campaign rows apart) is
  back to 95 % of its rate before the restart, sampled every 0.25 s from a side connection.

Last line: `chaos result=PASS|FAIL lost=N duplicate_effects=N invariants_broken=N money_mismatch=N
restart_recovery_s=X`. Everything started is stopped at the end (process groups), on Ctrl-C and errors too; only
`.run/` is written, and `evidence/chaos.md` when asked.

Rooms: `owned.py` (the cluster, Redis and processes it owns, its knobs), `plan.py` (the seeded fault plan and
the injector), `load.py` (the API load and the delivery sampler), `drill.py` (the run and its counts), `report.py`
(the record, the result line, the evidence file). The CDC profile (`outbox chaos --profile cdc`): `cdc.py` (the
system it owns, the order load, the run and its counts), `cdc_plan.py` (its seeded fault plan and injector),
`cdc_probes.py` (where its pieces are and what they say), `cdc_report.py` (its record and evidence).
"""

from __future__ import annotations

from jobs.drills.chaos.drill import run_chaos
from jobs.drills.chaos.report import EVIDENCE

__all__ = ["EVIDENCE", "run_chaos"]

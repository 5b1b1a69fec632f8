"""`outbox` — one console script for operators, on-call and CI. One line per module:

- `app` — the app and its entry point.
- `oncall` — on-call and operators: migrate, seed, check, status, why, pause, resume.
- `apikeys` — API keys: create, list, revoke.
- `messages` — the ledger and bulk review: messages, replay, resolve.
- `runtime` — starting the system: worker, relay, receiver, up.
- `drills` — scenario, bench, storm, chaos, vacuum-drill, replica-drill.
- `campaigns` — campaigns with live progress.
- `retention` — partitions ensure and list, archive, prune.
- `console` — the consoles and the lane check they share.
"""

from jobs.cli.app import app as app
from jobs.cli.app import main as main

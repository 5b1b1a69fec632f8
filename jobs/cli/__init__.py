"""`outbox` — one console script for operators, on-call and CI: the app and its entry point (`app`), and one module
per kind of command (`oncall`, `runtime`, `drills`, `campaigns`)."""

from jobs.cli.app import app as app
from jobs.cli.app import main as main

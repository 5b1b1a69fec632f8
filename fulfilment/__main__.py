"""`python -m fulfilment migrate [--reset]` · `python -m fulfilment consume [--once]` (migrates first) ·
`python -m fulfilment check`: the inbox's counts as one JSON line; exit 1 when an event was projected twice."""

from __future__ import annotations

import argparse
import json
import sys
import time

import psycopg
import sqlalchemy as sa

from fulfilment import consume, db, inbox


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fulfilment", description="Fulfilment projection fed by the stream.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("migrate", help="create the service's database if missing and migrate it")
    m.add_argument("--reset", action="store_true", help="drop and recreate the database first")
    c = sub.add_parser("consume", help="migrate, then consume the stream until SIGTERM")
    c.add_argument("--once", action="store_true", help="one pass over what is waiting, then exit")
    sub.add_parser("check", help="print the inbox's counts; exit 1 if an event was projected twice")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        with db.connect() as conn:
            counts = inbox.counts(conn)
        print(json.dumps(counts, sort_keys=True), flush=True)
        return 1 if counts["projected_twice"] else 0
    if args.cmd == "consume":
        if args.once:
            db.migrate()
        else:
            _migrate_once_reachable()
        return consume.run(once=args.once)
    db.migrate(reset=args.reset)
    return 0


def _migrate_once_reachable(retry_s: float = 1.0) -> None:
    """A consumer started while its database is down or restarting waits for it, as the consuming loop does,
    instead of exiting: nothing restarts a service that died at start."""
    while True:
        try:
            db.migrate()
            return
        except (psycopg.OperationalError, sa.exc.OperationalError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"fulfilment waiting for its database: {type(e).__name__}: {first}", file=sys.stderr, flush=True)
            time.sleep(retry_s)  # SIGTERM's default action still ends the process here


if __name__ == "__main__":
    sys.exit(main())

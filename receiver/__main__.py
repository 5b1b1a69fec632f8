"""`python -m receiver migrate [--reset]` · `python -m receiver serve [--port P] [--reset]`.

`serve` applies the receiver's own migrations first (creating its database if missing), then serves.
"""

from __future__ import annotations

import argparse
import time

import sqlalchemy as sa
import uvicorn

from receiver import db, logs


def _migrate_when_reachable(reset: bool, deadline_s: float = 30.0) -> None:
    """Migrate, waiting up to `deadline_s` for PostgreSQL: a receiver restarted while the database itself restarts
    (the chaos drill can do both at once) waits for it instead of exiting."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            db.migrate(reset=reset)
            return
        except sa.exc.OperationalError:
            if time.monotonic() > end:
                raise
            time.sleep(0.25)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m receiver", description="The mock outside world.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("migrate", help="create the receiver's database if missing and migrate it")
    m.add_argument("--reset", action="store_true", help="drop and recreate the database first")
    s = sub.add_parser("serve", help="migrate, then serve the receiver")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8090)
    s.add_argument("--reset", action="store_true", help="start from an empty database")
    args = ap.parse_args(argv)
    _migrate_when_reachable(args.reset)
    if args.cmd == "serve":
        logs.configure()
        uvicorn.run("receiver.app:app", host=args.host, port=args.port, log_level="warning", log_config=None)


if __name__ == "__main__":
    main()

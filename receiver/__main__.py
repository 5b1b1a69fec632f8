"""`python -m receiver migrate [--reset]` · `python -m receiver serve [--port P] [--workers N] [--reset]`.

`serve` applies the receiver's own migrations first (creating its database if missing), clears the fault switches,
then serves with N processes (uvicorn's supervisor restarts one that dies; SIGTERM stops them all).
"""

from __future__ import annotations

import argparse
import os
import time

import sqlalchemy as sa
import uvicorn

from receiver import db, faults, logs, server
from receiver.settings import get_settings


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
    s.add_argument("--workers", type=int, default=None, help="server processes (default: RECEIVER_WORKERS, 2)")
    args = ap.parse_args(argv)
    _migrate_when_reachable(args.reset)
    if args.cmd == "serve":
        logs.configure()
        serve(args.host, args.port, args.workers or get_settings().workers)


def serve(host: str, port: int, workers: int) -> None:
    with db.engine().begin() as c:  # a receiver starts with every switch off, as when they lived in memory
        c.execute(db.receiver_faults.update().values(fail_503=0, fail_422=0, slow_seconds=0, accept_then_hang=0,
                                                     accept_then_drop=0, receipt_delay=None))
    flag = faults.create_flag(port)
    os.environ[faults.FLAG_ENV] = str(flag)  # the server processes inherit it
    try:
        uvicorn.run("receiver.app:app", host=host, port=port, workers=workers, log_level="warning", log_config=None,
                    access_log=False, **server.uvicorn_options())
    finally:
        flag.unlink(missing_ok=True)


if __name__ == "__main__":
    main()

"""`python -m receiver migrate [--reset]` · `python -m receiver serve [--port P] [--reset]`.

`serve` applies the receiver's own migrations first (creating its database if missing), then serves.
"""

from __future__ import annotations

import argparse

import uvicorn

from receiver import db, logs


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
    db.migrate(reset=args.reset)
    if args.cmd == "serve":
        logs.configure()
        uvicorn.run("receiver.app:app", host=args.host, port=args.port, log_level="warning", log_config=None)


if __name__ == "__main__":
    main()

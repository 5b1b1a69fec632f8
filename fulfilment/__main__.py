"""`python -m fulfilment migrate [--reset]` · `python -m fulfilment consume [--once]` (migrates first) ·
`python -m fulfilment check`: the inbox's counts as one JSON line; exit 1 when an event was projected twice."""

from __future__ import annotations

import argparse
import json
import sys

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
    db.migrate(reset=getattr(args, "reset", False))
    if args.cmd == "consume":
        return consume.run(once=args.once)
    return 0


if __name__ == "__main__":
    sys.exit(main())

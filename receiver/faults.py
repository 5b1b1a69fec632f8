"""The /faults switch board, correct with any number of receiver processes.

The switches live in the receiver's own PostgreSQL (`receiver_faults`, one row): a counted fault is taken with one
atomic `UPDATE … SET n = n - 1 WHERE n > 0 RETURNING`, so N processes racing take each shot once. Reading that row
on every request would cost each request a round trip, so every process also maps one shared byte, "armed", and
reads the row only while it is set: `serve` creates the byte in a small file mapped by each process
(RECEIVER_ARMED_FLAG names it); a receiver run in-process (the tests' ASGI transport) keeps it in memory.

The byte is written while the row lock is held, before the commit, so concurrent `/faults` calls leave the byte and
the row agreeing; a request that reads the byte between the write and the commit reads the row as it was, which is
what it would have seen a moment earlier. No switch exists (404, nothing read) unless RECEIVER_FAULTS is on.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Literal

from psycopg import AsyncConnection, sql
from pydantic import BaseModel

from receiver import db
from receiver.settings import get_settings

FLAG_ENV = "RECEIVER_ARMED_FLAG"
Counted = Literal["fail_503", "fail_422", "accept_then_hang", "accept_then_drop"]


class FaultRequest(BaseModel):
    fail_503: int = 0  # the next N calls answer 503
    fail_422: int = 0  # the next N calls answer 422 unsupported_schema
    slow_seconds: float = 0.0  # every call waits this long first
    accept_then_hang: int = 0  # the next N effects are applied, then the response never comes
    accept_then_drop: int = 0  # the next N effects are applied, then the connection dies mid-response
    receipt_delay: float | None = None  # providers post their receipt this long after accepting (None: the setting)


def flag_path(port: int) -> Path:
    """One file per receiver port (a restarted receiver reuses its own; receivers on other ports have theirs)."""
    shm = Path("/dev/shm")
    return (shm if shm.is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))) / f"mock-receiver-{port}.armed"


def create_flag(port: int) -> Path:
    """`serve`, before its processes start: a cleared byte (a receiver restarts with every switch off)."""
    path = flag_path(port)
    path.write_bytes(b"\0")
    return path


class ArmedFlag:
    def __init__(self) -> None:
        self._buf: mmap.mmap | bytearray | None = None

    def _byte(self) -> mmap.mmap | bytearray:
        if self._buf is None:
            path = os.environ.get(FLAG_ENV)
            if path:
                with open(path, "r+b") as fh:
                    self._buf = mmap.mmap(fh.fileno(), 1)
            else:
                self._buf = bytearray(1)
        return self._buf

    def get(self) -> bool:
        return self._byte()[0] == 1

    def set(self, armed: bool) -> None:
        self._byte()[0] = 1 if armed else 0


ARMED = ArmedFlag()


def enabled() -> bool:
    return get_settings().faults


def armed() -> bool:
    return enabled() and ARMED.get()


async def replace(f: FaultRequest) -> None:
    """Replace every switch at once (`FaultRequest()` clears them all)."""
    is_armed = f != FaultRequest()

    async def write(c: AsyncConnection) -> None:
        async with c.transaction():
            await c.execute(
                "UPDATE receiver_faults SET fail_503 = %s, fail_422 = %s, slow_seconds = %s, accept_then_hang = %s, "
                "accept_then_drop = %s, receipt_delay = %s WHERE id = 1",
                (f.fail_503, f.fail_422, f.slow_seconds, f.accept_then_hang, f.accept_then_drop, f.receipt_delay))
            ARMED.set(is_armed)  # under the row lock, before the commit (see the module's docstring)

    await db.run(write)


async def take(name: Counted) -> bool:
    """Consume one shot of a counted fault; False at once (no query) while nothing is armed."""
    if not armed():
        return False

    async def dec(c: AsyncConnection) -> bool:
        cur = await c.execute(sql.SQL("UPDATE receiver_faults SET {n} = {n} - 1 WHERE id = 1 AND {n} > 0 RETURNING 1")
                              .format(n=sql.Identifier(name)))
        return await cur.fetchone() is not None

    return await db.run(dec)


async def current() -> FaultRequest | None:
    """The switches as set, or None while nothing is armed."""
    if not armed():
        return None

    async def read(c: AsyncConnection) -> FaultRequest | None:
        cur = await c.execute("SELECT fail_503, fail_422, slow_seconds, accept_then_hang, accept_then_drop, "
                              "receipt_delay FROM receiver_faults WHERE id = 1")
        row = await cur.fetchone()
        if row is None:
            return None
        return FaultRequest(fail_503=row[0], fail_422=row[1], slow_seconds=row[2], accept_then_hang=row[3],
                            accept_then_drop=row[4], receipt_delay=row[5])

    return await db.run(read)

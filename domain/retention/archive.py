"""`outbox archive --before YYYY-MM`: every month before it whose partitions still exist is written to a redacted
file and its partitions detached and dropped — or, if any month still owes anything, nothing at all.

A month of history here is its messages (`notifications`, by `created_at`), their attempts
(`notification_attempts`, by the message's month) and the receipts received in it (`delivery_receipts`): one file
is the month's whole record, and its three partitions are dropped together (attempts first: they reference their
messages). The messages' dedupe keys stay in `ledger_keys` (a message once ledgered is never ledgered again, and its
id still names its month: "archived on …, in file …" on its page, `archived_message`); their one-time codes go, and
the daily cap slots they held are taken off their counts. Balance entries stay (money history: invariant 7).

Refused, changing nothing, for a cutoff later than the current month (this month is still written), and while a
message of a month to archive is still owed (QUEUED: a worker must still act on it) or a receipt of it waits to be
applied. The file holds ids, states, times and money, never a contact point, a payload, a code, rendered text or a
provider's answer, and every string is swept for e-mail addresses and phone numbers on the way out
(domain/logs.py). Each month is one transaction: replays held off (a replay waits for the commit), its partitions
locked against writes, owed checked again, rows read, the file written and synced, partitions detached and dropped,
receipt keys forgotten, committed. A month that fails (a lock not granted in 5 s) is left whole; run it again.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.logs import sweep
from domain.retention import sql
from domain.retention.months import bounds, month_of
from domain.retention.partitions import Partition, default_months, ensure_partitions, partitions


class ArchiveRefused(RuntimeError):
    """A month before the cutoff still owes something: nothing was archived, nothing changed."""

    def __init__(self, owed: dict[str, dict[str, int]]) -> None:
        self.owed = owed
        detail = "; ".join(f"{m}: {n['messages']} owed message(s), {n['receipts']} receipt(s) to apply"
                           for m, n in owed.items())
        super().__init__(f"refused, nothing archived: {detail}")


@dataclass(frozen=True)
class ArchivedMonth:
    month: str
    path: Path
    messages: int
    attempts: int
    receipts: int
    dropped: list[str] = field(default_factory=list)


def archive_before(before: date, out_dir: Path, *, actor_ref: str, engine: Engine | None = None,
                   now: datetime | None = None) -> list[ArchivedMonth]:
    if before.day != 1:
        raise ValueError("archive works on whole months: give the first month to keep (YYYY-MM)")
    this = month_of(now or datetime.now(UTC))
    if before > this:  # this month is still written (and so are the months ahead): never archived
        raise ValueError(f"the current month ({this:%Y-%m}) is still being written: give --before {this:%Y-%m} "
                         "or an earlier month")
    owed = _owed(set(_months_before(before, engine)) | default_months(engine), before, engine)
    if owed:
        raise ArchiveRefused(owed)  # checked before anything moves: a refusal changes nothing
    ensure_partitions(now=now, engine=engine)  # rows of a month that sat in a DEFAULT partition join their month
    months = _months_before(before, engine)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [_archive_month(m, parts, out_dir, actor_ref, engine) for m, parts in sorted(months.items())]


def _months_before(before: date, engine: Engine | None) -> dict[date, list[Partition]]:
    months: dict[date, list[Partition]] = {}
    for p in partitions(engine):
        if p.month is not None and p.month < before:
            months.setdefault(p.month, []).append(p)
    return months


def _owed(months: set[date], before: date,
          engine: Engine | None) -> dict[str, dict[str, int]]:
    owed: dict[str, dict[str, int]] = {}
    with UnitOfWork(engine) as uow:
        for m in sorted(x for x in months if x < before):
            lo, hi = bounds(m)
            row = uow.execute(sql.OWED_IN_MONTH, {"lo": lo, "hi": hi}).one()
            if row.messages or row.receipts:
                owed[f"{m:%Y-%m}"] = {"messages": int(row.messages), "receipts": int(row.receipts)}
    return owed


def _archive_month(m: date, parts: list[Partition], out_dir: Path, actor_ref: str,
                   engine: Engine | None) -> ArchivedMonth:
    lo, hi = bounds(m)
    path = _free_name(out_dir, m)
    with UnitOfWork(engine) as uow:
        uow.execute(sql.LOCK_TIMEOUT)
        uow.execute(sql.ARCHIVE_EXCLUDES_REPLAY)  # no replay commits between the check below and our commit
        side = [p.name for p in parts if p.parent != "notifications"]
        if side:
            uow.execute(sql.lock_month(side))
        for p in parts:
            if p.parent == "notifications":
                uow.execute(sql.lock_ledger_month(p.name))
        row = uow.execute(sql.OWED_IN_MONTH, {"lo": lo, "hi": hi}).one()
        if row.messages or row.receipts:  # owed since the check above: leave the month whole
            raise ArchiveRefused({f"{m:%Y-%m}": {"messages": int(row.messages), "receipts": int(row.receipts)}})
        messages = [_redacted(r._mapping) for r in uow.execute(sql.MONTH_MESSAGES, {"lo": lo, "hi": hi})]
        rows: dict[str, list[dict[str, Any]]] = {"notification_attempts": [], "delivery_receipts": []}
        for p in parts:
            if p.parent in rows:
                rows[p.parent] = [_redacted(r._mapping) for r in uow.execute(sql.partition_rows(p.parent, p.name))]
        head = {"kind": "archive", "month": f"{m:%Y-%m}", "archived_at": datetime.now(UTC).isoformat(),
                "messages": len(messages), "attempts": len(rows["notification_attempts"]),
                "receipts": len(rows["delivery_receipts"]), "partitions": [p.name for p in parts]}
        _write(path, head, [("message", messages), ("attempt", rows["notification_attempts"]),
                            ("receipt", rows["delivery_receipts"])])
        uow.execute(sql.FORGET_MONTH_CODES, {"lo": lo, "hi": hi})
        uow.execute(sql.GIVE_BACK_MONTH_SLOTS, {"lo": lo, "hi": hi})
        for p in parts:  # in PARTITIONED's order: the ledger's partition last (its attempts reference it)
            for stmt in sql.detach_and_drop(p.parent, p.name):
                uow.execute(stmt)
        uow.execute(sql.FORGET_RECEIPT_KEYS, {"lo": lo, "hi": hi})
        uow.execute(sql.RECORD_ARCHIVE, {"m": m, "f": str(path), "n": len(messages), "who": actor_ref})
        actions.record(uow, tenant_id=None, actor_ref=actor_ref, action="archive", target=f"ledger {m:%Y-%m}",
                       note=f"{head['messages']} messages, {head['attempts']} attempts, {head['receipts']} receipts "
                            f"-> {path.name}; dropped {', '.join(p.name for p in parts)}")
        uow.commit()
    return ArchivedMonth(f"{m:%Y-%m}", path, len(messages), len(rows["notification_attempts"]),
                         len(rows["delivery_receipts"]), [p.name for p in parts])


@dataclass(frozen=True)
class ArchivedMessage:
    """Where a message of an archived month went."""

    notification_id: int
    month: str
    archived_at: datetime
    file: str

    def words(self) -> str:
        return (f"archived on {self.archived_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC with its month {self.month}, "
                f"in file {self.file}")


def archived_message(uow: UnitOfWork, tenant_id: int, notification_id: int) -> ArchivedMessage | None:
    """The archive this tenant's message id left in, or None (never ledgered, another tenant's, or still here).
    Read through its kept key."""
    r = uow.execute(sql.ARCHIVED_MESSAGE, {"id": notification_id, "t": tenant_id}).first()
    if r is None:
        return None
    return ArchivedMessage(notification_id, f"{r.month:%Y-%m}", r.archived_at, str(r.file))


def _free_name(out_dir: Path, m: date) -> Path:
    """`ledger-YYYY-MM.jsonl`, or `ledger-YYYY-MM.2.jsonl`, … when a month is archived again (a message of an
    archived month replayed later files new attempts under it): an export already written is never replaced."""
    path, n = out_dir / f"ledger-{m:%Y-%m}.jsonl", 1
    while path.exists():
        n += 1
        path = out_dir / f"ledger-{m:%Y-%m}.{n}.jsonl"
    return path


def _redacted(row: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in dict(row).items():
        if isinstance(v, datetime):
            v = v.isoformat()
        elif isinstance(v, uuid.UUID):
            v = str(v)
        elif isinstance(v, str):
            v = sweep(v)
        out[k] = v
    return out


def _write(path: Path, head: dict[str, Any], kinds: list[tuple[str, list[dict[str, Any]]]]) -> None:
    """Written beside its final name, synced, then renamed: a file under the final name is always whole."""
    tmp = path.with_suffix(".jsonl.partial")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(json.dumps(head) + "\n")
        for kind, items in kinds:
            for item in items:
                fh.write(json.dumps({"kind": kind, **item}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)

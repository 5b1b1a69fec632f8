"""Provider delivery receipts: SENT -> DELIVERED | FAILED, once per receipt id, in whatever order they come.

A receipt names the provider's reference and echoes the idempotency key we sent (`client_reference`: the row's
`provider_key`, or its dedupe key). Each is kept first, then settled with its row by the ledger's one mechanism
(`domain/ledger/write.py` `settle_receipts`, which also settles any other receipt the row still had pending):
- `delivered` while the row is still owed: applied at once (the truth; the worker in flight is fenced out);
- `failed` before the worker recorded the send: kept (`applied_at` NULL, answered 202) until the row is settled,
  however that happens — the record of the attempt (a send: refunded), a suppressing claim, a campaign cancel, a
  journey supersede, an endpoint disabled, a `delivered` receipt — all in the settling transaction;
- a `delivered` receipt for a row that ended unsent (the worker timed out, the provider had accepted) is the
  late truth: the row becomes DELIVERED and is charged (domain/ledger/write.py);
- a `failed` receipt for a SENT row refunds it; DELIVERED is final (a later `failed` is closed, changing nothing);
  on a row settled unsent it is closed too (nothing was charged).
Neither the reference nor the key known: kept as it arrived (support can see it), answered 404.

A provider may post its receipts one at a time or many in one request (`apply_receipts`): a batch is ONE
transaction — its rows found and locked in id order by one statement (however each is found, by the reference or
by our key: two batches take turns, never deadlock), its receipts kept by one statement, and every row's pending
receipts settled by one call of `settle_receipts` — with an answer per receipt, as if each had come alone. A
campaign's receipts then cost the API and the database a commit per batch, not per message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork, is_deadlock
from domain.delivery.sql_record import BY_KEY, BY_REFERENCE, KEEP, ROWS_BY_REFERENCES, ROWS_FOR_RECEIPTS
from domain.ledger.write import settle_receipts

__all__ = ["MAX_BATCH", "OUTCOMES", "Receipt", "ReceiptResult", "apply_receipt", "apply_receipts"]

OUTCOMES = ("delivered", "failed")
MAX_BATCH = 250  # receipts in one request (one transaction holds every row's lock); ≈ 45 KB of typical receipts, under
# the default body limit (OUTBOX_MAX_BODY_BYTES, 64 KB), which a provider meets first with long keys: 413, it splits
DEADLOCK_ATTEMPTS = 4


@dataclass(frozen=True)
class Receipt:
    """One receipt as the provider posts it: its id (unique for ever), the provider's reference for the message,
    delivered or failed, and the idempotency key we sent, echoed back (found by it while the reference is unknown)."""

    receipt_id: str
    reference: str
    outcome: str
    client_reference: str | None = None


@dataclass(frozen=True)
class ReceiptResult:
    status: str  # applied | pending | duplicate | unknown_reference
    notification_id: int | None = None
    tenant_id: int | None = None
    order_id: int | None = None


def apply_receipt(provider: str, receipt_id: str, reference: str, outcome: str, client_reference: str | None = None,
                  engine: Engine | None = None) -> ReceiptResult:
    """One receipt: a batch of one (`apply_receipts`)."""
    return apply_receipts(provider, [Receipt(receipt_id, reference, outcome, client_reference)], engine)[0]


def apply_receipts(provider: str, receipts: Sequence[Receipt], engine: Engine | None = None) -> list[ReceiptResult]:
    """Keep each receipt, then settle it with its row ("applied" — or closed, when it no longer applies); "pending"
    while its row is still owed and the receipt waits for the record. One answer per receipt, in order. A receipt id
    twice in one batch is kept once (the second answers "duplicate"). An outcome other than delivered or failed
    refuses the whole batch (ValueError) before anything is written. Chosen as a deadlock's victim (a batch's rows
    against another many-row statement), the whole transaction runs again: nothing of it was kept."""
    for r in receipts:
        if r.outcome not in OUTCOMES:
            raise ValueError(f"receipt {r.receipt_id!r}: outcome must be delivered or failed")
    if len(receipts) > MAX_BATCH:
        raise ValueError(f"at most {MAX_BATCH} receipts in one batch")
    for attempt in range(DEADLOCK_ATTEMPTS):
        try:
            return _apply(provider, receipts, engine)
        except sa.exc.OperationalError as exc:
            if not is_deadlock(exc) or attempt == DEADLOCK_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _still_its_row(row: Any, r: Receipt) -> bool:
    """The row, as it stands locked, is still the one the receipt names: by its reference, or by our key while the
    reference is not on it."""
    return row.provider_reference == r.reference or (
        r.client_reference is not None and row.current_key == r.client_reference)


@dataclass(frozen=True)
class _Located:
    """A row as the batch statements answer it: what it says once locked, and the places (1-based) of the
    receipts found on it by reference and by key."""

    id: int
    status: str
    tenant_id: int
    order_id: int | None
    provider_reference: str | None
    current_key: str | None
    by_reference: tuple[int, ...]
    by_key: tuple[int, ...]


def _row_alone(uow: UnitOfWork, provider: str, r: Receipt) -> list[_Located]:
    """A lone receipt's row, found and locked by the one-row statements (the newest row by the provider's
    reference, else by the key we sent) — a row's lock alone cannot deadlock, so the batch statements' one order
    is not needed, and a quiet provider's every receipt does not pay for them (ROWS_BY_REFERENCES took 0.72 ms a
    lone receipt, BY_REFERENCE 0.25 ms, client-timed medians on the bench's ledger)."""
    row = uow.execute(BY_REFERENCE, {"reference": r.reference, "provider": provider}).first()
    by_reference = row is not None
    if row is None and r.client_reference is not None:
        row = uow.execute(BY_KEY, {"key": r.client_reference, "provider": provider}).first()
    if row is None:
        return []
    return [_Located(int(row.id), str(row.status), int(row.tenant_id), row.order_id, row.provider_reference,
                     row.current_key, (1,) if by_reference else (), () if by_reference else (1,))]


def _apply(provider: str, receipts: Sequence[Receipt], engine: Engine | None) -> list[ReceiptResult]:
    if not receipts:
        return []
    with UnitOfWork(engine) as uow:
        rows: list[Any] = [None] * len(receipts)
        found: dict[int, tuple[bool, int]] = {}  # a receipt's place -> (found by its reference, row id): the best
        params = {"references": [r.reference for r in receipts], "keys": [r.client_reference for r in receipts],
                  "provider": provider}
        located: Sequence[Any]
        if len(receipts) == 1:  # a receipt alone (a quiet provider): its one row, as a receipt always was found
            located = _row_alone(uow, provider, receipts[0])
        else:
            located = uow.execute(ROWS_BY_REFERENCES, params).all()  # the common case: every send recorded
            if {place for row in located for place in row.by_reference} != set(range(1, len(receipts) + 1)):
                located = uow.execute(ROWS_FOR_RECEIPTS, params).all()  # some found by our key, or not at all
        for row in located:
            for by_reference, places in ((True, row.by_reference), (False, row.by_key)):
                for place in places:
                    if found.get(place, (False, 0)) < (by_reference, int(row.id)):
                        found[place], rows[place - 1] = (by_reference, int(row.id)), row
        for i, r in enumerate(receipts):
            if rows[i] is not None and not _still_its_row(rows[i], r):  # changed before the lock: found again
                rows[i] = uow.execute(BY_REFERENCE, {"reference": r.reference, "provider": provider}).first()
                if rows[i] is None and r.client_reference is not None:
                    rows[i] = uow.execute(BY_KEY, {"key": r.client_reference, "provider": provider}).first()
        first = {r.receipt_id: i for i, r in reversed(list(enumerate(receipts)))}  # a receipt id's first place
        fresh = [i for i, r in enumerate(receipts) if first[r.receipt_id] == i]
        kept = {str(k.receipt_id): int(k.id) for k in uow.execute(KEEP, {
            "provider": provider, "receipt_ids": [receipts[i].receipt_id for i in fresh],
            "references": [receipts[i].reference for i in fresh], "outcomes": [receipts[i].outcome for i in fresh],
            "notification_ids": [rows[i].id if rows[i] is not None else None for i in fresh]})}
        settled = set(settle_receipts(uow, [int(row.id) for row in rows if row is not None]))
        uow.commit()
    # Each answered as if it had come alone: a `failed` receipt for a row still owed when it came is kept waiting
    # for the record ("pending"), though a later receipt of the batch settled the row (and it) in this transaction.
    owed = {int(row.id) for row in rows if row is not None and row.status == "QUEUED"}
    results = []
    for i, (r, row) in enumerate(zip(receipts, rows, strict=True)):
        if row is None:
            results.append(ReceiptResult("unknown_reference"))
            continue
        kept_id = kept.get(r.receipt_id) if first[r.receipt_id] == i else None
        status = "duplicate" if kept_id is None else "applied" if kept_id in settled else "pending"
        if kept_id is not None and int(row.id) in owed:
            if r.outcome == "failed":
                status = "pending"
            else:  # the truth: the row is owed no more
                owed.discard(int(row.id))
        results.append(ReceiptResult(status, int(row.id), int(row.tenant_id),
                                     None if row.order_id is None else int(row.order_id)))
    return results

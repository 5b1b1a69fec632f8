"""Provider delivery receipts: SENT -> DELIVERED | FAILED, once per receipt id, in whatever order they come.

A receipt names the provider's reference and echoes the idempotency key we sent (`client_reference`: the row's
`provider_key`, or its dedupe key). No receipt is lost:
- `delivered` while the row is still owed: applied at once (the truth; the worker in flight is fenced out);
- `failed` before the worker recorded the send: kept (`applied_at` NULL, answered 202) and applied in the
  transaction that records the attempt or settles the row (`apply_pending`);
- a `delivered` receipt for a row that ended unsent (the worker timed out, the provider had accepted) is the
  late truth: the row becomes DELIVERED and is charged (domain/ledger/write.py);
- a `failed` receipt for a SENT row refunds it; DELIVERED is final (a later `failed` changes nothing).
Neither the reference nor the key known: kept as it arrived (support can see it), answered 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.delivery import sql
from domain.delivery.sql import BY_KEY, BY_REFERENCE, KEEP, PENDING
from domain.ledger import metering
from domain.ledger.write import accept_truth

__all__ = ["BY_KEY", "BY_REFERENCE", "KEEP", "PENDING", "ReceiptResult", "apply_pending", "apply_receipt"]


@dataclass(frozen=True)
class ReceiptResult:
    status: str  # applied | pending | duplicate | unknown_reference
    notification_id: int | None = None
    tenant_id: int | None = None
    order_id: int | None = None


def apply_receipt(provider: str, receipt_id: str, reference: str, outcome: str, client_reference: str | None = None,
                  engine: Engine | None = None) -> ReceiptResult:
    if outcome not in ("delivered", "failed"):
        raise ValueError("outcome must be delivered or failed")
    with UnitOfWork(engine) as uow:
        x = uow.execute
        n = x(BY_REFERENCE, {"r": reference, "p": provider}).first()
        if n is None and client_reference is not None:
            n = x(BY_KEY, {"k": client_reference, "p": provider}).first()
        # receipt_id is unique: a provider retrying the same receipt changes nothing.
        kept = x(KEEP, {"i": receipt_id, "p": provider, "r": reference, "o": outcome,
                        "n": n.id if n is not None else None}).first()
        if n is None:
            uow.commit()
            return ReceiptResult("unknown_reference")
        if kept is None:
            return ReceiptResult("duplicate", n.id, n.tenant_id, n.order_id)
        applied = _apply(uow, n, int(kept.id), reference, outcome)
        uow.commit()
    return ReceiptResult("applied" if applied else "pending", n.id, n.tenant_id, n.order_id)


def apply_pending(uow: UnitOfWork, notification_id: int) -> int:
    """Apply the receipts that came before the send was recorded (called where an attempt is recorded)."""
    pending = uow.execute(PENDING, {"n": notification_id}).all()
    if not pending:
        return 0
    row = uow.execute(sql.ROW_FOR_UPDATE, {"n": notification_id}).first()
    done = 0
    for p in pending:
        done += _apply(uow, row, int(p.id), str(p.provider_reference), str(p.outcome))
        row = uow.execute(sql.ROW_STATUS, {"n": notification_id}).first()
    return done


def _apply(uow: UnitOfWork, n: Any, kept_id: int, reference: str, outcome: str) -> bool:
    """One receipt against the row as it stands. A `delivered` receipt is the truth at once, even while the row
    is still owed (a worker may be waiting out its deadline on a hung answer; the truth fences it out). False: a
    `failed` receipt for a send not recorded yet waits for the record."""
    if n.status == "QUEUED" and outcome == "failed":
        return False
    if outcome == "delivered" and n.status != "DELIVERED":
        # SENT -> DELIVERED, or the late truth for a row that ended unsent (charged again, with why).
        accept_truth(uow, int(n.id), final="DELIVERED", provider_reference=reference, delivered=True)
    elif outcome == "failed" and n.status == "SENT":
        uow.execute(sql.SENT_UNDELIVERABLE, {"id": n.id})
        # The provider could not deliver it: the tenant does not pay for it.
        metering.release(uow, int(n.id), "refund: provider could not deliver")
    elif outcome == "failed" and n.status == "FAILED":
        # Failed for want of an answer, though the provider had taken it: now we know it bounced (a replay
        # then sends it as a new message).
        uow.execute(sql.FAILED_UNDELIVERABLE, {"id": n.id})
    uow.execute(sql.RECEIPT_APPLIED, {"i": kept_id})
    return True

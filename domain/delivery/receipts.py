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
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.delivery.sql_record import BY_KEY, BY_REFERENCE, KEEP
from domain.ledger.write import settle_receipts

__all__ = ["BY_KEY", "BY_REFERENCE", "KEEP", "ReceiptResult", "apply_receipt"]


@dataclass(frozen=True)
class ReceiptResult:
    status: str  # applied | pending | duplicate | unknown_reference
    notification_id: int | None = None
    tenant_id: int | None = None
    order_id: int | None = None


def apply_receipt(provider: str, receipt_id: str, reference: str, outcome: str, client_reference: str | None = None,
                  engine: Engine | None = None) -> ReceiptResult:
    """Keep the receipt, then settle it with its row ("applied" — or closed, when it no longer applies); "pending"
    while its row is still owed and the receipt waits for the record."""
    if outcome not in ("delivered", "failed"):
        raise ValueError("outcome must be delivered or failed")
    with UnitOfWork(engine) as uow:
        row = uow.execute(BY_REFERENCE, {"provider_reference": reference, "provider": provider}).first()
        if row is None and client_reference is not None:
            row = uow.execute(BY_KEY, {"key": client_reference, "provider": provider}).first()
        # receipt_id is unique: a provider retrying the same receipt changes nothing.
        kept = uow.execute(KEEP, {"receipt_id": receipt_id, "provider": provider, "provider_reference": reference,
                                  "outcome": outcome, "notification_id": row.id if row is not None else None}).first()
        if row is None:
            uow.commit()
            return ReceiptResult("unknown_reference")
        if kept is None:
            return ReceiptResult("duplicate", row.id, row.tenant_id, row.order_id)
        applied = int(kept.id) in settle_receipts(uow, [int(row.id)])
        uow.commit()
    return ReceiptResult("applied" if applied else "pending", row.id, row.tenant_id, row.order_id)

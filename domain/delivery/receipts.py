"""Provider delivery receipts: SENT -> DELIVERED | FAILED, once per receipt id.

A receipt names the provider's reference and echoes our idempotency key (`client_reference`). A receipt that
arrives before the worker recorded the send finds the row still QUEUED by that key: "not yet sent", the provider
retries. Neither known: an unknown reference. We never read the provider's own tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain import metering
from domain.db import UnitOfWork


@dataclass(frozen=True)
class ReceiptResult:
    status: str  # applied | duplicate | unknown_reference | not_yet_sent
    notification_id: int | None = None
    tenant_id: int | None = None
    order_id: int | None = None


def apply_receipt(provider: str, receipt_id: str, reference: str, outcome: str, client_reference: str | None = None,
                  engine: Engine | None = None) -> ReceiptResult:
    if outcome not in ("delivered", "failed"):
        raise ValueError("outcome must be delivered or failed")
    with UnitOfWork(engine) as uow:
        x = uow.execute
        n = x(sa.text("SELECT id, status, tenant_id, order_id FROM notifications WHERE provider_reference = :r "
                      "AND channel = :p FOR UPDATE"), {"r": reference, "p": provider}).first()
        if n is None:
            # The provider accepted it but our worker has not recorded the send yet: the row is still owed.
            in_flight = client_reference is not None and x(sa.text(
                "SELECT 1 FROM notifications WHERE dedupe_key = :k AND channel = :p AND status = 'QUEUED'"),
                {"k": client_reference, "p": provider}).first()
            if in_flight:
                return ReceiptResult("not_yet_sent")  # nothing recorded: the provider retries until we know it
            # Kept as it arrived (support can see it), answered 404.
            x(sa.text(
                "INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome) "
                "VALUES (:i, :p, :r, :o) ON CONFLICT (receipt_id) DO NOTHING"),
                {"i": receipt_id, "p": provider, "r": reference, "o": outcome})
            uow.commit()
            return ReceiptResult("unknown_reference")
        # receipt_id is unique: a provider retrying the same receipt changes nothing.
        inserted = x(sa.text(
            "INSERT INTO delivery_receipts (receipt_id, provider, provider_reference, outcome) "
            "VALUES (:i, :p, :r, :o) ON CONFLICT (receipt_id) DO NOTHING RETURNING id"),
            {"i": receipt_id, "p": provider, "r": reference, "o": outcome}).first()
        if inserted is None:
            return ReceiptResult("duplicate", n.id, n.tenant_id, n.order_id)
        if n.status == "SENT":
            x(sa.text("UPDATE notifications SET status = CAST(:s AS text), settled_at = now(), "
                      "last_error_class = CASE WHEN CAST(:s AS text) = 'FAILED' THEN 'undeliverable' END WHERE id = :id"),
              {"s": "DELIVERED" if outcome == "delivered" else "FAILED", "id": n.id})
            if outcome == "failed":  # the provider could not deliver it: the tenant does not pay for it
                metering.release(uow, n.id, "refund: provider could not deliver")
        uow.commit()
    return ReceiptResult("applied", n.id, n.tenant_id, n.order_id)



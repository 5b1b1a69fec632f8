"""Exact metering: money and cap slots are taken with guarded updates inside the transaction that claims a row,
so a send never starts without them; a row that ends unsent gives them back in the transaction that settles it.

- `reserve`: `balance_cents >= price` or nothing (the CHECK `balance >= 0` is the backstop). The reserve entry IS
  the charge when the row is SENT; `release` refunds it when the row ends FAILED or SUPPRESSED.
- `take_cap_slot`: one guarded increment of the recipient's counter for their local day; at the cap it takes
  nothing, so the cap fires at exactly N+1 however many workers race.
- Every movement is a `balance_entries` row: entries always sum to the balance (invariant 7), and a row's entries
  sum to minus what it holds (`reserved_cents`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork

# Default price per message per channel, seeded into each tenant's `channel_prices` (the table is what is charged).
DEFAULT_PRICE_CENTS: Final[dict[str, int]] = {"webhook": 0, "email": 1, "whatsapp": 3, "sms": 5}


CHANNELS: Final[tuple[str, ...]] = tuple(DEFAULT_PRICE_CENTS)


# One statement: the guarded debit, its entry and the row's hold. The tenant's balance row is the one row every
# send of that tenant locks, so the claim takes money LAST and in one round trip, and commits right after: the lock
# is held for a statement and a commit, not for the rest of the claim (a code waits behind bulk claims' locks).
_RESERVE = sa.text(
    "WITH b AS (UPDATE balances SET balance_cents = balance_cents - :c WHERE tenant_id = :t AND balance_cents >= :c "
    "RETURNING tenant_id), "
    "e AS (INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason) "
    "SELECT tenant_id, :n, 'reserve', -:c, :r FROM b), "
    "u AS (UPDATE notifications SET reserved_cents = :c WHERE id = :n AND EXISTS (SELECT 1 FROM b)) "
    "SELECT count(*) FROM b")
_ENTRY = sa.text(
    "INSERT INTO balance_entries (tenant_id, notification_id, kind, amount_cents, reason) "
    "VALUES (:t, :n, :k, :a, :r)")


def reserve(uow: UnitOfWork, *, tenant_id: int, notification_id: int, cost_cents: int, reason: str) -> bool:
    """Hold the price of one message. False: the balance cannot cover it (nothing changed)."""
    if cost_cents <= 0:
        return True
    return bool(uow.execute(_RESERVE, {"c": cost_cents, "t": tenant_id, "n": notification_id, "r": reason}).scalar())


def take_cap_slot(uow: UnitOfWork, *, tenant_id: int, recipient: str, day: date, cap: int,
                  notification_id: int) -> bool:
    """Count this message against the recipient's cap for `day`. False: the cap is reached (nothing changed)."""
    if cap <= 0:
        return False
    taken = uow.execute(sa.text(
        "INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken) VALUES (:t, :r, :d, 1) "
        "ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1 "
        "WHERE recipient_daily_counts.taken < :cap RETURNING taken"),
        {"t": tenant_id, "r": recipient, "d": day, "cap": cap}).first()
    if taken is None:
        return False
    uow.execute(sa.text("UPDATE notifications SET cap_day = :d WHERE id = :n"), {"d": day, "n": notification_id})
    return True


def release(uow: UnitOfWork, notification_id: int, reason: str = "refund: not sent") -> int:
    """Give back what a row holds (money and cap slot), once. Returns the cents refunded.

    Lock order: the row, its cap counter, then the balance — the claim's order (cap slot, money last): a refund
    and a claim of the same person's other message never wait on each other in a cycle."""
    row = uow.execute(sa.text(
        "SELECT tenant_id, recipient, reserved_cents AS held, cap_day AS day FROM notifications WHERE id = :n "
        "FOR UPDATE"), {"n": notification_id}).first()
    if row is None or (row.held == 0 and row.day is None):
        return 0
    uow.execute(sa.text("UPDATE notifications SET reserved_cents = 0, cap_day = NULL WHERE id = :n"),
                {"n": notification_id})
    if row.day is not None:
        _give_back_slot(uow, row.tenant_id, row.recipient, row.day)
    if row.held > 0:
        uow.execute(sa.text("UPDATE balances SET balance_cents = balance_cents + :c WHERE tenant_id = :t"),
                    {"c": row.held, "t": row.tenant_id})
        uow.execute(_ENTRY, {"t": row.tenant_id, "n": notification_id, "k": "refund", "a": row.held, "r": reason})
    return int(row.held)


def _give_back_slot(uow: UnitOfWork, tenant_id: int, recipient: str, day: date) -> None:
    uow.execute(sa.text(
        "UPDATE recipient_daily_counts SET taken = taken - 1 WHERE tenant_id = :t AND recipient = :r "
        "AND day = :d AND taken > 0"), {"t": tenant_id, "r": recipient, "d": day})


def release_stale_slot(uow: UnitOfWork, notification_id: int) -> None:
    """A row that took a cap slot on an earlier local day and is sent today counts against today: give the old
    day's slot back (the claim then takes today's)."""
    row = uow.execute(sa.text(
        "UPDATE notifications n SET cap_day = NULL FROM (SELECT id, cap_day FROM notifications WHERE id = :n "
        "FOR UPDATE) old WHERE n.id = old.id AND old.cap_day IS NOT NULL "
        "RETURNING n.tenant_id, n.recipient, old.cap_day AS day"), {"n": notification_id}).first()
    if row is not None:
        _give_back_slot(uow, row.tenant_id, row.recipient, row.day)


def count_sent_against_cap(uow: UnitOfWork, *, tenant_id: int, recipient: str, day: date,
                           notification_id: int) -> None:
    """A message that went out (a late truth) counts against the person's cap whether or not the cap had room:
    it was sent. Takes the slot without the cap check; the row holds it from now on."""
    uow.execute(sa.text(
        "INSERT INTO recipient_daily_counts (tenant_id, recipient, day, taken) VALUES (:t, :r, :d, 1) "
        "ON CONFLICT (tenant_id, recipient, day) DO UPDATE SET taken = recipient_daily_counts.taken + 1"),
        {"t": tenant_id, "r": recipient, "d": day})
    uow.execute(sa.text("UPDATE notifications SET cap_day = :d WHERE id = :n"), {"d": day, "n": notification_id})


@dataclass(frozen=True)
class TopUp:
    credited: bool  # False: this reference was credited before (nothing changed)
    balance_cents: int


# The balance column is a 32-bit integer: a credit that would carry it past this is refused, never an overflow.
MAX_BALANCE_CENTS = 2**31 - 1


class BalanceLimit(ValueError):
    """A credit would carry the balance past MAX_BALANCE_CENTS: nothing was credited."""


def top_up(tenant_id: int, amount_cents: int, reference: str, actor_ref: str,
           engine: Engine | None = None) -> TopUp:
    """Credit once per reference: the same reference twice credits once (answered as credited before, whatever
    the balance is now). A new credit past the balance's ceiling raises BalanceLimit and changes nothing."""
    if amount_cents <= 0:
        raise ValueError("amount_cents must be positive")
    with UnitOfWork(engine) as uow:
        current = uow.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = :t FOR UPDATE"),
                              {"t": tenant_id}).scalar() or 0
        known = uow.execute(sa.text("SELECT 1 FROM balance_entries WHERE tenant_id = :t AND reference = :ref"),
                            {"t": tenant_id, "ref": reference}).first()
        if known is None and current + amount_cents > MAX_BALANCE_CENTS:
            raise BalanceLimit(f"the balance would pass {MAX_BALANCE_CENTS / 100:,.2f}; top up less")
        inserted = uow.execute(sa.text(
            "INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason, reference, actor_ref) "
            "VALUES (:t, 'top_up', :a, :r, :ref, :who) ON CONFLICT (tenant_id, reference) DO NOTHING RETURNING id"),
            {"t": tenant_id, "a": amount_cents, "r": f"top-up {reference}", "ref": reference,
             "who": actor_ref}).first()
        if inserted is not None:
            actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="top-up",
                           target=f"balance +{amount_cents / 100:.2f}", note=f"reference {reference}")
            uow.execute(sa.text(
                "INSERT INTO balances (tenant_id, balance_cents) VALUES (:t, :a) "
                "ON CONFLICT (tenant_id) DO UPDATE SET balance_cents = balances.balance_cents + :a"),
                {"t": tenant_id, "a": amount_cents})
        balance = uow.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = :t"),
                              {"t": tenant_id}).scalar_one()
        uow.commit()
    return TopUp(inserted is not None, int(balance))


def run_out_at(balance_cents: int, spent_last_hour_cents: int, now: datetime) -> datetime | None:
    """When the balance runs out at the last hour's rate; None when nothing was spent (it does not run out)."""
    if spent_last_hour_cents <= 0:
        return None
    return now + timedelta(hours=balance_cents / spent_last_hour_cents)


def balance_view(tenant_id: int, now: datetime, engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sa.text(
            "SELECT coalesce((SELECT balance_cents FROM balances WHERE tenant_id = :t), 0) AS balance_cents, "
            "coalesce((SELECT -sum(amount_cents) FROM balance_entries WHERE tenant_id = :t "
            "  AND kind IN ('reserve', 'refund') AND created_at > CAST(:now AS timestamptz) - interval '1 hour'), 0)"
            "  AS spent_last_hour_cents"), {"t": tenant_id, "now": now}).one()
    balance, spent = int(r.balance_cents), max(0, int(r.spent_last_hour_cents))
    out = run_out_at(balance, spent, now)
    return {"balance_cents": balance, "spent_last_hour_cents": spent,
            "runs_out_at": out.isoformat() if out else None}


def entries(tenant_id: int, limit: int = 50, before_id: int | None = None,
            engine: Engine | None = None) -> list[dict[str, Any]]:
    """Newest first, a page at a time (keyset on id)."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sa.text(
            "SELECT id, kind, amount_cents, reason, reference, actor_ref, notification_id, created_at "
            "FROM balance_entries WHERE tenant_id = :t AND (CAST(:b AS bigint) IS NULL OR id < :b) "
            "ORDER BY id DESC LIMIT :l"), {"t": tenant_id, "b": before_id, "l": limit})]

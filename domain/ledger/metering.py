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

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.ledger import sql_metering

# Default price per message per channel, seeded into each tenant's `channel_prices` (the table is what is charged).
DEFAULT_PRICE_CENTS: Final[dict[str, int]] = {"webhook": 0, "email": 1, "whatsapp": 3, "sms": 5}


CHANNELS: Final[tuple[str, ...]] = tuple(DEFAULT_PRICE_CENTS)


def reserve(uow: UnitOfWork, *, tenant_id: int, notification_id: int, cost_cents: int, reason: str) -> bool:
    """Hold the price of one message. False: the balance cannot cover it (nothing changed)."""
    if cost_cents <= 0:
        return True
    return bool(uow.execute(sql_metering.RESERVE, {"c": cost_cents, "t": tenant_id, "n": notification_id,
                                                   "r": reason}).scalar())


def take_cap_slot(uow: UnitOfWork, *, tenant_id: int, recipient: str, day: date, cap: int,
                  notification_id: int) -> bool:
    """Count this message against the recipient's cap for `day`. False: the cap is reached (nothing changed)."""
    if cap <= 0:
        return False
    taken = uow.execute(sql_metering.TAKE_CAP_SLOT, {"t": tenant_id, "r": recipient, "d": day, "cap": cap}).first()
    if taken is None:
        return False
    uow.execute(sql_metering.SET_CAP_DAY, {"d": day, "n": notification_id})
    return True


def release(uow: UnitOfWork, notification_id: int, reason: str = "refund: not sent") -> int:
    """Give back what a row holds (money and cap slot), once. Returns the cents refunded.

    Lock order: the row, its cap counter, then the balance — the claim's order (cap slot, money last): a refund
    and a claim of the same person's other message never wait on each other in a cycle."""
    row = uow.execute(sql_metering.READ_HOLD, {"n": notification_id}).first()
    if row is None or (row.held == 0 and row.day is None):
        return 0
    uow.execute(sql_metering.CLEAR_HOLD, {"n": notification_id})
    if row.day is not None:
        _give_back_slot(uow, row.tenant_id, row.recipient, row.day)
    if row.held > 0:
        uow.execute(sql_metering.CREDIT, {"c": row.held, "t": row.tenant_id})
        uow.execute(sql_metering.ENTRY, {"t": row.tenant_id, "n": notification_id, "k": "refund", "a": row.held,
                                         "r": reason})
    return int(row.held)


def _give_back_slot(uow: UnitOfWork, tenant_id: int, recipient: str, day: date) -> None:
    uow.execute(sql_metering.GIVE_BACK_SLOT, {"t": tenant_id, "r": recipient, "d": day})


def release_stale_slot(uow: UnitOfWork, notification_id: int) -> None:
    """A row that took a cap slot on an earlier local day and is sent today counts against today: give the old
    day's slot back (the claim then takes today's)."""
    row = uow.execute(sql_metering.CLEAR_STALE_CAP_DAY, {"n": notification_id}).first()
    if row is not None:
        _give_back_slot(uow, row.tenant_id, row.recipient, row.day)


def count_sent_against_cap(uow: UnitOfWork, *, tenant_id: int, recipient: str, day: date,
                           notification_id: int) -> None:
    """A message that went out (a late truth) counts against the person's cap whether or not the cap had room:
    it was sent. Takes the slot without the cap check; the row holds it from now on."""
    uow.execute(sql_metering.COUNT_SENT_SLOT, {"t": tenant_id, "r": recipient, "d": day})
    uow.execute(sql_metering.SET_CAP_DAY, {"d": day, "n": notification_id})


@dataclass(frozen=True)
class TopUp:
    credited: bool  # False: this reference was credited before (nothing changed)
    balance_cents: int


# The most a balance may come to once every owed row has given back what it holds: a top-up past it is refused
# (`balance_limit`), so a refund of an owed row's hold can never carry the balance past it. The column is 64-bit,
# so no refund can overflow it either — not even a SENT row's charge given back by a failed receipt (money the
# ceiling does not count: it may carry the balance past the ceiling, and the next top-up is refused). A credit on
# the way back never raises: the record that refunds is never lost to arithmetic.
MAX_BALANCE_CENTS = 2**31 - 1


class BalanceLimit(ValueError):
    """A credit would carry the balance past MAX_BALANCE_CENTS (counting what owed rows hold): nothing was
    credited. The message says, in plain words, how much can be credited now."""


def _money(cents: int) -> str:
    return f"{cents / 100:,.2f}"


def lock_balance(uow: UnitOfWork, tenant_id: int) -> None:
    """Hold the tenant's balance row until the transaction ends: taken before any other row a transaction that may
    move money locks after it (the lock order every claim keeps: the balance, then an endpoint's row)."""
    uow.execute(sql_metering.LOCK_BALANCE, {"t": tenant_id})


def top_up(tenant_id: int, amount_cents: int, reference: str, actor_ref: str,
           engine: Engine | None = None, *, note: str = "") -> TopUp:
    """Credit once per reference: the same reference twice credits once (answered as credited before, whatever
    the balance is now). A new credit that would carry the balance past its ceiling once the money owed rows hold
    is given back raises BalanceLimit and changes nothing.

    The balance row is locked first: a claim's reserve waits for it, and a refund of an owed row (its hold still
    committed as held until the refund commits) is counted as held, so the sum read after the lock is exact."""
    if amount_cents <= 0:
        raise ValueError("amount_cents must be positive")
    with UnitOfWork(engine) as uow:
        current = uow.execute(sql_metering.LOCK_BALANCE, {"t": tenant_id}).scalar() or 0
        known = uow.execute(sql_metering.KNOWN_REFERENCE, {"t": tenant_id, "ref": reference}).first()
        if known is None:
            held = int(uow.execute(sql_metering.HELD_BY_OWED, {"t": tenant_id}).scalar() or 0)
            if current + held + amount_cents > MAX_BALANCE_CENTS:
                room = max(0, MAX_BALANCE_CENTS - current - held)
                raise BalanceLimit(
                    f"the balance would pass its ceiling of {_money(MAX_BALANCE_CENTS)} once the {_money(held)} "
                    f"held for messages still owed is given back; at most {_money(room)} can be credited now")
        inserted = uow.execute(sql_metering.INSERT_TOP_UP, {"t": tenant_id, "a": amount_cents,
                                                            "r": f"top-up {reference}", "ref": reference,
                                                            "who": actor_ref}).first()
        if inserted is not None:
            actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="top-up",
                           target=f"balance +{amount_cents / 100:.2f}",
                           note=f"reference {reference}" + (f": {note}" if note else ""))
            uow.execute(sql_metering.ADD_TO_BALANCE, {"t": tenant_id, "a": amount_cents})
        balance = uow.execute(sql_metering.BALANCE, {"t": tenant_id}).scalar_one()
        uow.commit()
    return TopUp(inserted is not None, int(balance))


def run_out_at(balance_cents: int, spent_last_hour_cents: int, now: datetime) -> datetime | None:
    """When the balance runs out at the last hour's rate; None when nothing was spent (it does not run out)."""
    if spent_last_hour_cents <= 0:
        return None
    return now + timedelta(hours=balance_cents / spent_last_hour_cents)


def balance_view(tenant_id: int, now: datetime, engine: Engine | None = None) -> dict[str, Any]:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql_metering.BALANCE_VIEW, {"t": tenant_id, "now": now}).one()
    balance, spent = int(r.balance_cents), max(0, int(r.spent_last_hour_cents))
    out = run_out_at(balance, spent, now)
    return {"balance_cents": balance, "spent_last_hour_cents": spent,
            "runs_out_at": out.isoformat() if out else None}


def balance_hours(tenant_id: int, limit: int, before: int | None = None, after: int | None = None,
                  engine: Engine | None = None) -> list[int]:
    """The hours (since the epoch, UTC) that have balance entries: up to `limit` older than hour `before`, newest
    first, or just newer than hour `after`, oldest first (a keyset read, domain/support/pages.py makes it a page)."""
    with UnitOfWork(engine) as uow:
        if after is not None:
            rows = uow.execute(sql_metering.BALANCE_HOURS_AFTER, {"t": tenant_id, "a": after, "l": limit})
        else:
            rows = uow.execute(sql_metering.BALANCE_HOURS_BEFORE, {"t": tenant_id, "b": before, "l": limit})
        return [int(h) for h in rows.scalars()]


def hour_sums(tenant_id: int, first: int, last: int, engine: Engine | None = None) -> list[dict[str, Any]]:
    """The entries of hours `first` to `last` summed, newest first: charges and refunds one row per hour each
    ("312 charges, -3.12 EUR"), every other entry (a top-up, an opening, an adjustment) a row of its own. Their
    amounts sum to the hours' entries exactly."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sql_metering.BALANCE_HOUR_SUMS,
                                                      {"t": tenant_id, "lo": first, "hi": last})]


def hour_entries(tenant_id: int, hour: int, limit: int, before: int | None = None, after: int | None = None,
                 engine: Engine | None = None) -> list[dict[str, Any]]:
    """One hour's entries (hour since the epoch, UTC), a keyset page by id: `limit` rows older than `before`, or
    just newer than `after` (those oldest first)."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sql_metering.HOUR_ENTRIES,
                                                      {"t": tenant_id, "h": hour, "b": before, "a": after, "l": limit})]


def entries(tenant_id: int, limit: int = 50, before_id: int | None = None,
            engine: Engine | None = None) -> list[dict[str, Any]]:
    """Newest first, a page at a time (keyset on id)."""
    with UnitOfWork(engine) as uow:
        return [dict(r._mapping) for r in uow.execute(sql_metering.ENTRIES,
                                                      {"t": tenant_id, "b": before_id, "l": limit})]

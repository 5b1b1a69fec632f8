"""The balance page refuses a top-up past the balance's ceiling in plain words, in a real browser.

Invariant: a top-up that would carry the balance past its ceiling once what owed messages hold comes back is not
credited, changes nothing, and on-call is told how much can be credited now (the API's 422 `balance_limit`). Before,
the page's event raised and nothing was shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.invariants import invariant_counts
from domain.ledger.metering import MAX_BALANCE_CENTS
from e2e.conftest import APP, shot

pytestmark = pytest.mark.e2e


def _adjust(delta: int, why: str) -> None:
    """Move tenant 42's balance by `delta` with an adjustment entry, under the balance row's lock (the workers of
    this system are claiming meanwhile): entries still sum to the balance."""
    with get_engine().begin() as c:
        c.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = 42 FOR UPDATE"))
        c.execute(sa.text("INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason) "
                          "VALUES (42, 'adjustment', :d, :r)"), {"d": delta, "r": why})
        c.execute(sa.text("UPDATE balances SET balance_cents = balance_cents + :d WHERE tenant_id = 42"), {"d": delta})


@contextmanager
def near_the_ceiling(room_cents: int) -> Iterator[None]:
    """Tenant 42's balance `room_cents` below the ceiling for the test, then back (other tests top up)."""
    with get_engine().connect() as c:
        balance = int(c.execute(sa.text("SELECT balance_cents FROM balances WHERE tenant_id = 42")).scalar_one())
    delta = MAX_BALANCE_CENTS - room_cents - balance
    _adjust(delta, "e2e: near the ceiling")
    try:
        yield
    finally:
        _adjust(-delta, "e2e: back from the ceiling")


def entries() -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT count(*) FROM balance_entries WHERE tenant_id = 42")).scalar_one())


def test_a_top_up_past_the_ceiling_is_refused_in_plain_words(new_operator):
    a = new_operator("alice")
    with near_the_ceiling(5_000_000_00):
        a.goto(f"{APP}/balance")
        a.get_by_test_id("balance").wait_for()
        before = entries()
        a.get_by_test_id("topup-amount").fill("6000000")
        a.get_by_test_id("topup-reference").fill(f"INV-CEIL-{datetime.now(UTC):%H%M%S%f}")
        a.get_by_test_id("topup-submit").click()
        a.get_by_test_id("topup-confirm").click()
        a.get_by_test_id("error").wait_for()
        text = a.get_by_test_id("error").inner_text()
        assert "Not credited: the balance would pass its ceiling of 21,474,836.47" in text, text
        assert "held for messages still owed" in text and "can be credited now" in text, text
        assert entries() == before, "a refused top-up writes nothing"
        shot(a, "balance-ceiling")
    assert not any(invariant_counts().values())

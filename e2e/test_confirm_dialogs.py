"""Irreversible actions in a real browser (issue 27, item 2): each asks first, says what follows in plain words,
wants a note, and the thing's own page then says who did it.

Invariants: backing out of the dialog changes nothing and audits nothing; confirming without a note changes
nothing and says why; confirming with one acts once and leaves exactly one audit row (who, what, the note), which
the page shows.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.orders.commands import create_order
from e2e.conftest import APP, RECEIVER, shot
from jobs.ops.procs import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def no_endpoint_outlives_its_test():  # type: ignore[no-untyped-def]
    """Tenant 42 has no endpoint of its own in every other browser test (its order events go to the mock receiver)."""
    yield
    from domain.endpoints import store

    for ep in store.list_endpoints(42):
        store.delete(42, int(ep["id"]), "test-cleanup")


def audited(target: str) -> list[tuple[str, str, str | None]]:
    """The audit rows on one thing (its exact name, or it followed by ` → <url>`)."""
    with get_engine().connect() as c:
        return [tuple(r) for r in c.execute(sa.text(
            "SELECT actor_ref, action, note FROM operator_actions WHERE target = :g OR starts_with(target, :g || ' ') "
            "ORDER BY id"), {"g": target})]


def order_state(oid: int) -> tuple[str, int, int]:
    with get_engine().connect() as c:
        return tuple(c.execute(sa.text(  # type: ignore[return-value]
            "SELECT o.status, o.revision, (SELECT count(*) FROM outbox_events e WHERE e.aggregate_type = 'order' "
            "AND e.aggregate_id = :s) FROM orders o WHERE o.id = :o"), {"o": oid, "s": str(oid)}).one())


def test_order_cancel_asks_first_and_backing_out_changes_nothing(new_operator):
    oid = create_order(tenant_id=42, customer_ref="cust-002", amount_cents=2500, currency="EUR")
    before = order_state(oid)
    a = new_operator("bob")
    a.goto(f"{APP}/orders/{oid}")
    a.get_by_test_id("cancel").click()
    dialog = a.get_by_test_id("order-cancel-dialog")
    dialog.wait_for()
    a.get_by_test_id("order-cancel-summary").filter(has_text="cannot be undone").wait_for()
    assert "customer is told" in a.get_by_test_id("order-cancel-summary").inner_text()
    shot(a, "order-cancel-confirm")
    a.get_by_test_id("order-cancel-keep").click()
    dialog.wait_for(state="detached")
    assert order_state(oid) == before and audited(f"order {oid}") == [], "backing out changed nothing"
    a.get_by_test_id("cancel").click()
    a.get_by_test_id("order-cancel-confirm").click()  # no note
    a.get_by_test_id("order-cancel-error").wait_for()
    assert order_state(oid) == before and audited(f"order {oid}") == [], "no note: nothing changed"
    a.get_by_test_id("order-cancel-note").fill("customer asked by phone")
    a.get_by_test_id("order-cancel-confirm").click()
    a.locator("[data-testid=order-status][data-status=cancelled]").wait_for()
    who = a.get_by_test_id("order-cancelled-by").inner_text()
    assert "Cancelled by bob" in who and "customer asked by phone" in who, who
    assert audited(f"order {oid}") == [("operator:bob", "order cancel", "customer asked by phone")]
    assert order_state(oid)[:2] == ("cancelled", before[1] + 1)


def stored(url: str) -> list[sa.Row]:
    with get_engine().connect() as c:
        return list(c.execute(sa.text("SELECT id, secret, disabled_at FROM webhook_endpoints WHERE url = :u"),
                              {"u": url}))


def test_endpoint_disable_rotate_and_delete_are_confirmed_in_words_and_say_who_did_them(new_operator):
    url = f"{RECEIVER}/webhooks/orders"
    a = new_operator("alice")
    a.goto(f"{APP}/endpoints")
    a.get_by_test_id("endpoint-url").fill(url)
    a.get_by_test_id("add-endpoint").click()
    a.get_by_test_id("endpoint-secret").wait_for()
    ((eid, secret, _),) = stored(url)
    row = a.get_by_test_id("endpoint-row").filter(has_text=url)
    dialog, text = a.get_by_test_id("endpoint-confirm-dialog"), a.get_by_test_id("endpoint-confirm-text")

    row.get_by_test_id("disable-endpoint").click()
    text.filter(has_text="receives no more events").wait_for()
    a.get_by_test_id("confirm-endpoint-action").click()  # no note
    a.get_by_test_id("endpoint-confirm-error").wait_for()
    assert stored(url)[0][2] is None, "no note: still enabled"
    a.get_by_test_id("endpoint-confirm-note").fill("receiver down for maintenance")
    a.get_by_test_id("confirm-endpoint-action").click()
    wait_until(lambda: stored(url)[0][2] is not None, 10, "the endpoint to be disabled")
    row.get_by_test_id("endpoint-last-action").filter(has_text="Disabled by alice").wait_for()

    row.get_by_test_id("rotate-endpoint").click()
    text.filter(has_text="rejects every event").wait_for()  # rotate says what happens after the overlap
    a.get_by_test_id("endpoint-confirm-keep").click()
    dialog.wait_for(state="detached")
    assert stored(url)[0][1] == secret, "backing out of a rotation keeps the secret"
    row.get_by_test_id("rotate-endpoint").click()
    a.get_by_test_id("endpoint-confirm-note").fill("secret pasted in a ticket")
    a.get_by_test_id("confirm-endpoint-action").click()
    a.get_by_test_id("endpoint-secret").wait_for()
    rotated = a.get_by_test_id("endpoint-secret").inner_text().strip()
    assert rotated != secret and stored(url)[0][1] == rotated
    row.get_by_test_id("endpoint-last-action").filter(has_text="Secret rotated by alice").wait_for()

    row.get_by_test_id("delete-endpoint").click()
    text.filter(has_text="cannot be undone").wait_for()
    shot(a, "endpoint-delete-confirm")
    a.get_by_test_id("endpoint-confirm-note").fill("moved to the new receiver")
    a.get_by_test_id("confirm-endpoint-action").click()
    wait_until(lambda: not stored(url), 10, "the endpoint to be deleted")
    assert [(w, n) for _, w, n in audited(f"endpoint {eid}")] == [
        ("create webhook endpoint", None), ("disable webhook endpoint", "receiver down for maintenance"),
        ("rotate webhook endpoint secret", "secret pasted in a ticket"),
        ("delete webhook endpoint", "moved to the new receiver")], "one audit row per action, each with its note"

"""What an order's refresh hint may show before the page reloads (pure: no browser, no server).

Invariants: an order's own hint carries the revision and status it committed (`wakeups.refresh_message`), and the
order page shows those two ahead of its reload only when they are a plain revision and a known status of an order
hint; any other hint (a notification's, a check, a resync) or a malformed one shows nothing early — the page then
waits for its reload from PostgreSQL, as every hint is followed by one.
"""

from __future__ import annotations

import json

import pytest

from dashboard.format import MAX_ID
from dashboard.pages.order_detail_data import pushed_head
from domain.delivery.wakeups import refresh_message


def test_an_order_hint_carries_its_committed_revision_and_status_and_the_page_reads_them() -> None:
    msg = json.loads(refresh_message(42, 7, 3, "e-1", "order", "approved"))
    assert msg["status"] == "approved" and msg["revision"] == 3
    assert pushed_head(msg) == (3, "approved")


def test_a_hint_without_a_status_carries_none_and_shows_nothing_early() -> None:
    msg = json.loads(refresh_message(42, 7, -1, None, "notification"))
    assert "status" not in msg
    assert pushed_head(msg) is None


@pytest.mark.parametrize("msg", [
    {"kind": "notification", "revision": 3, "status": "approved"},  # not the order's own change
    {"kind": "check", "version": "x"},
    {"kind": "resync"},
    {"kind": "order", "revision": 3},  # a publisher that sent no status
    {"kind": "order", "revision": 3, "status": "shipped"},  # no such status
    {"kind": "order", "revision": 3, "status": ["approved"]},
    {"kind": "order", "revision": True, "status": "approved"},  # a bool is not a revision
    {"kind": "order", "revision": "3", "status": "approved"},
    {"kind": "order", "revision": 0, "status": "approved"},
    {"kind": "order", "revision": MAX_ID + 1, "status": "approved"},
    {"kind": "order", "revision": 3.0, "status": "approved"},
])
def test_any_other_or_malformed_hint_shows_nothing_before_the_reload(msg: dict[str, object]) -> None:
    assert pushed_head(msg) is None

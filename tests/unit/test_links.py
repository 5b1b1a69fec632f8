"""Links that work, the pure parts: a page position comes only from row ids in the URL; a search is a link unless
its query is a phone or an email (those stay out of URLs, browser history and proxy logs)."""

from __future__ import annotations

from dashboard.paging import position, url
from dashboard.search_state import search_url


def test_a_page_position_is_a_row_id_or_nothing() -> None:
    assert position({"before": "120"}) == (120, None)
    assert position({"after": "7"}) == (None, 7)
    assert position({"before": "120", "after": "7"}) == (120, None)  # one direction at a time
    for junk in ("0", "-1", "1e3", "²", "99999999999", "", "12 OR 1=1"):
        assert position({"before": junk, "after": junk}) == (None, None), junk


def test_urls_keep_what_is_set_and_drop_the_rest() -> None:
    assert url("/ledger", {"status": "FAILED", "before": 120, "after": None, "recipient": ""}) == \
        "/ledger?status=FAILED&before=120"
    assert url("/ledger", {}) == "/ledger"
    assert url("/ledger", {"recipient": "a&b=c"}) == "/ledger?recipient=a%26b%3Dc"


def test_a_search_is_a_link_unless_it_names_a_contact_point() -> None:
    assert search_url("#4940") == "/search?q=%234940"
    assert search_url("cust-001") == "/search?q=cust-001"
    assert search_url("email-88753550ad4f") == "/search?q=email-88753550ad4f"
    for contact in ("+919800000001", "+91 98000 00001", "asha@example.test", "919800000001"):
        assert search_url(contact) == "/search", contact
    assert search_url("   ") == "/search"

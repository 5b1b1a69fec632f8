"""Search terms from the browser's address bar or a forged form, on real PostgreSQL.

Invariant: a NUL, a lone surrogate or any other unprintable character in `?q=` (/journeys, /recipients, /audit) or
`?recipient=` (/ledger) is a harmless search — the page's reads answer (a first page, nothing of another tenant),
never a driver error in the event handler.
"""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.format import search_text
from domain.ledger import recipients as ledger_recipients
from domain.ledger import views as ledger_views
from domain.support import pages
from domain.support.search import audit_named

HOSTILE = ["\x00", "cust\x00-001", "\ud800", "cust-\x1b[31m", "a" * 10_000]


@pytest.mark.parametrize("raw", HOSTILE)
def test_a_hostile_search_term_is_a_harmless_search(db: str, raw: str) -> None:
    """Invariant: every read the list pages make with the term as the page cleans it answers, within the tenant."""
    q = search_text(raw, 64)
    assert "\x00" not in q and "\ud800" not in q and len(q) <= 64
    reads: list[Any] = [pages.leads(42, q), pages.recipients(42, q),
                        ledger_views.ledger_rows(42, ledger_views.LedgerFilter(recipient=q or None)),
                        audit_named(42, search_text(raw, 200) or "x")["timeline"],
                        ledger_recipients.find_by_ref(42, q or "x")]
    rows, _ = reads[2]
    assert all(r["tenant_id"] == 42 for r in rows)
    assert all(r["tenant_id"] == 42 for r in reads[1].rows if "tenant_id" in r)
    assert search_text("cust\x00-001", 64) == "cust-001"

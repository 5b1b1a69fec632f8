"""A campaign's and a lead's own pages, and keyset paging on a list, in a real browser.

Invariants: /campaigns/{id} shows the campaign's progress and its messages, each a link to its message page;
/journeys/{lead} shows the lead's furthest step, every nudge with why it ended and the events with their decisions;
another tenant's campaign or lead looks exactly like a missing one; a campaign's cancel (it cannot be undone) asks for a
note, refuses without one, and leaves one audit row that the campaign's own page shows (who, when, why); a list pages
older / newer by keyset with its search and position in the URL, so a reload (or a shared link) shows the same page.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from domain.campaigns import fan_out as campaign_fan_out
from domain.db import get_engine
from domain.delivery.lanes import set_lane_paused
from domain.journeys import store as journey_store
from domain.ledger import recipients
from e2e.conftest import APP, shot
from jobs.ops.procs import wait_until

pytestmark = pytest.mark.e2e


def test_a_campaign_has_its_own_page_with_progress_and_messages(new_operator):
    # Tenant 7's few recipients: no daily cap of tenant 42's people (other tests send to them) is touched.
    name = f"Detail {datetime.now(UTC):%H%M%S%f}"
    cid = campaign_fan_out.create(tenant_id=7, name=name, segment="all_reachable", template="offer",
                                  channel="email", actor_ref="test:e2e", note="detail page")
    m = new_operator("carol")  # the fan-out runs on the bulk lane meanwhile

    def ledgered() -> bool:
        m.goto(f"{APP}/campaigns/{cid}")
        m.get_by_test_id("campaign-name").wait_for()
        return m.get_by_test_id("campaign-message-row").count() > 0

    wait_until(ledgered, 60, "the campaign's messages to be ledgered and shown")
    assert m.get_by_test_id("campaign-name").inner_text() == name
    summary = m.get_by_test_id("campaign-summary").inner_text()
    assert "nothing suppressed" in summary or "not sent: " in summary, "suppressed rows are counted in words"
    assert "all_reachable × offer by email" in m.content()
    first = m.get_by_test_id("campaign-message-row").first.get_by_test_id("message-link")
    nid = first.inner_text().lstrip("#")
    shot(m, "campaign-detail")
    first.click()
    m.wait_for_url(f"**/messages/{nid}")
    m.get_by_test_id("message-answer").wait_for()
    other = new_operator("sam")  # tenant 42
    other.goto(f"{APP}/campaigns/{cid}")
    other.get_by_test_id("empty-state").wait_for()
    assert "No such campaign for your tenant." in other.get_by_test_id("empty-state").inner_text()


def test_a_campaign_cancel_is_confirmed_with_a_note_audited_once_and_shown_on_its_page(new_operator):
    name = f"Cancel {datetime.now(UTC):%H%M%S%f}"
    set_lane_paused("bulk", True, note="e2e: keep the campaign owed while it is cancelled")
    try:
        cid = campaign_fan_out.create(tenant_id=7, name=name, segment="all_reachable", template="offer",
                                      channel="email", actor_ref="operator:carol", note="winter offer")
        m = new_operator("carol")
        m.goto(f"{APP}/campaigns")
        row = m.get_by_test_id("campaign-row").filter(has_text=name)
        row.get_by_test_id("campaign-cancel").click()
        dialog = m.get_by_test_id("campaign-cancel-dialog")
        dialog.wait_for()
        assert "cannot be undone" in m.get_by_test_id("campaign-cancel-summary").inner_text()
        m.get_by_test_id("campaign-cancel-confirm").click()  # no note: refused, nothing changes
        m.wait_for_function("() => document.body.innerText.includes('Say why')")
        assert campaign_status(cid) != "cancelled"
        m.get_by_test_id("campaign-cancel-note").fill("customer complaint, ticket 77")
        m.get_by_test_id("campaign-cancel-confirm").click()
        m.get_by_test_id("campaign-notice").wait_for()
        assert f"Campaign {cid} cancelled" in m.get_by_test_id("campaign-notice").inner_text()
    finally:
        set_lane_paused("bulk", False, note="e2e: done")
    assert campaign_status(cid) == "cancelled"
    with get_engine().connect() as c:
        kept = c.execute(sa.text("SELECT actor_ref, note FROM operator_actions WHERE action = 'campaign cancel' "
                                 "AND target LIKE :g"), {"g": f"campaign {cid} (%"}).all()
    assert [tuple(k) for k in kept] == [("operator:carol", "customer complaint, ticket 77")]
    m.goto(f"{APP}/campaigns/{cid}")
    m.get_by_test_id("campaign-history").first.wait_for()
    history = m.get_by_test_id("campaign-history").all_inner_texts()
    assert history[0].startswith("Started by carol") and "winter offer" in history[0]
    assert history[-1].startswith("Cancelled by carol") and "customer complaint, ticket 77" in history[-1]
    shot(m, "campaign-cancelled-history")


def campaign_status(cid: int) -> str:
    with get_engine().connect() as c:
        return str(c.execute(sa.text("SELECT status FROM campaigns WHERE id = :i"), {"i": cid}).scalar_one())


def test_a_lead_has_its_own_page_with_nudges_and_why_each_ended(new_operator):
    lid = journey_store.create_lead(42, "cust-007", "advisor-anna")
    stamp = f"{datetime.now(UTC):%H%M%S%f}"
    for step in ("initiated", "credit_check_done"):
        journey_store.record_lead_event(42, lid, step, event_id=f"e2e-lead-{stamp}-{step}")
    g = new_operator("alice")
    g.goto(f"{APP}/journeys?q=cust-007")
    g.wait_for_function(f"() => [...document.querySelectorAll('[data-testid=lead-link]')]"
                        f".some(a => a.getAttribute('href') === '/journeys/{lid}')")
    g.locator(f"[data-testid=lead-link][href='/journeys/{lid}']").click()
    g.wait_for_url(f"**/journeys/{lid}")
    g.get_by_test_id("lead-id").wait_for()
    assert g.get_by_test_id("lead-id").inner_text() == f"Lead #{lid}"
    assert "credit_check_done" in g.get_by_test_id("lead-step").inner_text()
    g.wait_for_function("() => document.querySelectorAll('[data-testid=lead-intent-row]').length === 2")
    intents = [r.inner_text() for r in g.get_by_test_id("lead-intent-row").all()]
    assert any("superseded by credit_check_done" in t for t in intents), intents
    assert g.get_by_test_id("lead-event-row").count() == 2
    shot(g, "lead-detail")
    c = new_operator("carol")
    c.goto(f"{APP}/journeys/{lid}")
    c.get_by_test_id("empty-state").wait_for()
    assert "No such lead for your tenant." in c.get_by_test_id("empty-state").inner_text()


def test_the_recipients_list_pages_by_keyset_with_its_search_in_the_url(new_operator):
    stamp = f"e2e-page-{datetime.now(UTC):%H%M%S%f}"
    for i in range(55):
        recipients.create(42, {"ref": f"{stamp}-{i:02d}", "display_name": f"Paged {i}", "timezone": "UTC"},
                          "test:e2e")
    s = new_operator("sam")
    s.goto(f"{APP}/recipients?q={stamp}")
    s.wait_for_function("() => document.querySelectorAll('[data-testid=recipient-row]').length === 50")
    assert s.get_by_test_id("recipient-link").first.inner_text() == f"{stamp}-54", "newest first"
    assert s.get_by_test_id("recipients-pager-newer").is_disabled()
    s.get_by_test_id("recipients-pager-older").click()
    s.wait_for_function("() => document.querySelectorAll('[data-testid=recipient-row]').length === 5")
    s.wait_for_function(f"() => location.search.includes('before=') && location.search.includes('q={stamp}')")
    assert s.get_by_test_id("recipients-pager-older").is_disabled()
    s.reload()  # the position is a link
    s.wait_for_function("() => document.querySelectorAll('[data-testid=recipient-row]').length === 5")
    assert s.get_by_test_id("recipient-link").first.inner_text() == f"{stamp}-04"
    s.get_by_test_id("recipients-pager-newer").click()
    s.wait_for_function("() => document.querySelectorAll('[data-testid=recipient-row]').length === 50")
    assert s.get_by_test_id("recipient-link").first.inner_text() == f"{stamp}-54"
    shot(s, "recipients-paged")

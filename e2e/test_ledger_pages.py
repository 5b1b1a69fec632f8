"""Support and finance in a real browser: "stop messaging me on SMS" is one switch on the recipient's page, kept
with who and when, and the next SMS is suppressed with that reason in plain words; the balance page shows the money
and lets on-call top it up (once per reference).

Invariants: an opt-out made in the page is what the worker obeys; the page's answer names who opted them out and
when; a top-up reference credits once; an ordinary operator is not offered the top-up.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from domain.db import get_engine
from domain.invariants import invariant_counts
from domain.ledger.recipients import find_by_ref
from domain.ledger.send import send
from e2e.conftest import APP, shot
from jobs.ops.procs import wait_until

pytestmark = pytest.mark.e2e


def one_status(notification_id: int) -> str:
    with get_engine().connect() as c:
        return str(c.execute(sa.text("SELECT status FROM notifications WHERE id = :i"),
                             {"i": notification_id}).scalar_one())


def test_support_opts_a_recipient_out_of_sms_and_the_next_sms_says_why(new_operator):
    b = new_operator("bob")
    b.goto(f"{APP}/recipients")
    b.get_by_test_id("recipient-query").fill("cust-004")
    b.get_by_test_id("recipient-query").press("Enter")
    b.wait_for_function("() => document.querySelectorAll('[data-testid=recipient-row]').length === 1")
    b.get_by_test_id("recipient-link").click()
    b.get_by_test_id("channel-sms").wait_for()
    assert b.get_by_test_id("channel-sms").get_attribute("data-state") == "checked"
    b.get_by_test_id("channel-sms").click()
    b.get_by_test_id("recipient-notice").wait_for()
    assert "will no longer get SMS" in b.get_by_test_id("recipient-notice").inner_text()
    change = b.get_by_test_id("change-row").first.inner_text()
    assert "operator:bob" in change and "opted_out_channels" in change
    ((tenant, rid),) = find_by_ref(42, "cust-004")
    row = send(tenant_id=tenant, recipient_id=rid, channel="sms", template="offer", lane="normal",
               data={"headline": "Winter sale."}, subject_period=f"e2e-{datetime.now(UTC):%H%M%S%f}")
    assert row is not None and row.created
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    expected = f"not sent: opted out of SMS on {today} by operator:bob"
    # The relay wakes the normal worker, which suppresses it at send time; the page reads it on load.
    wait_until(lambda: one_status(row.notification_id) == "SUPPRESSED", 30, "the worker to settle the SMS")
    b.reload()
    b.get_by_test_id("message-answer").first.wait_for()
    answers = [a.inner_text() for a in b.get_by_test_id("message-answer").all()]
    assert expected in answers, answers
    shot(b, "recipient-opted-out")
    assert not any(invariant_counts().values())


def test_on_call_tops_up_once_per_reference_and_operators_are_not_offered_it(new_operator):
    a = new_operator("alice")
    a.goto(f"{APP}/balance")
    a.get_by_test_id("balance").wait_for()
    ref = f"INV-{datetime.now(UTC):%H%M%S%f}"
    for _ in range(2):
        a.get_by_test_id("topup-amount").fill("12.34")
        a.get_by_test_id("topup-reference").fill(ref)
        a.get_by_test_id("topup-submit").click()
        # The amount is read back in words before anything is credited.
        a.get_by_test_id("topup-confirm-text").filter(has_text="twelve euros and thirty-four cents").wait_for()
        a.get_by_test_id("topup-confirm").click()
        a.get_by_test_id("balance-notice").wait_for()
    a.wait_for_function(f"() => document.querySelector('[data-testid=balance-notice]').innerText.includes("
                        f"'{ref} was already credited')")
    top_ups = [r.inner_text() for r in a.get_by_test_id("entry-row").all() if "12.34" in r.inner_text()]
    assert len(top_ups) == 1 and "operator:alice" in top_ups[0]
    shot(a, "balance")
    b = new_operator("bob")
    b.goto(f"{APP}/balance")
    b.get_by_test_id("balance").wait_for()
    assert b.get_by_test_id("topup-submit").count() == 0
    assert not any(invariant_counts().values())


def test_a_campaign_started_in_the_page_shows_its_progress_live(new_operator):
    """The campaign page starts a campaign on the bulk lane and follows it without a reload until it is done."""
    a = new_operator("alice")
    a.goto(f"{APP}/campaigns")
    a.get_by_test_id("campaign-name").fill("Browser blast")
    a.get_by_test_id("campaign-start").click()
    summary = a.get_by_test_id("campaign-summary")  # nothing starts before the audience and cost are shown
    summary.wait_for()
    assert re.search(r"to [\d,]+ people .*estimated cost up to [\d,]+\.\d\d EUR", summary.inner_text()), \
        summary.inner_text()
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM campaigns WHERE name = 'Browser blast'")).scalar() == 0
    a.get_by_test_id("campaign-note").fill("winter offer, approved by marketing")
    a.get_by_test_id("campaign-confirm").click()
    a.get_by_test_id("campaign-notice").wait_for()
    with get_engine().connect() as c:
        kept = c.execute(sa.text("SELECT actor_ref FROM operator_actions WHERE action = 'campaign start' "
                                 "AND note = 'winter offer, approved by marketing'")).all()
    assert [k.actor_ref for k in kept] == ["operator:alice"], "the start is kept with who and why"
    a.wait_for_function("() => [...document.querySelectorAll('[data-testid=campaign-row]')].some(r => "
                        "r.innerText.includes('Browser blast') && /done|running/.test(r.innerText))",
                        timeout=60_000)
    row = a.get_by_test_id("campaign-row").filter(has_text="Browser blast")
    a.wait_for_function("() => [...document.querySelectorAll('[data-testid=campaign-row]')].some(r => "
                        "r.innerText.includes('Browser blast') && !/\\b0 \\//.test("
                        "r.querySelector('[data-testid=campaign-sent]').innerText))", timeout=60_000)
    assert "Browser blast" in row.inner_text()
    shot(a, "campaigns")
    assert not any(invariant_counts().values())

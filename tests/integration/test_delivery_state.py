"""An honest state for every owed row (issue 27, item 1) — on real PostgreSQL, through the one read model every page
and command takes a queued message's answer from (domain/delivery/state.py, `sql_reads.OWED_STATES`).

Invariants protected: "being sent now" is said only while a live lease holds the row; otherwise the answer names
what actually holds it — a paused lane (since when, by whom: the first pause after the last resume), an open
breaker (until when), a balance short of the price (since when it stayed short), quiet hours (until when, in the
recipient's zone) — or the retry (which attempt failed, its HTTP status, the next try) or how overdue it is; what
the read model says holds a row is what the claim then does with it; the message page, the recipient page, the
ledger, search and `outbox why` all say the same words; a page of rows costs one statement; another tenant's row
has no state; a settled row keeps its own answer.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from dashboard.format import notification
from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery.lanes import set_lane_paused
from domain.delivery.retry import Retry, Succeeded
from domain.delivery.state import owed_states, with_states
from domain.ledger import otp
from domain.ledger.recipients import update
from domain.ledger.views import LedgerFilter
from domain.support import ledger as support_ledger
from domain.support.message import message_page
from domain.support.search import search
from tests.support.cli import OUTBOX
from tests.support.db import assert_invariants
from tests.support.endpoints import PUBLIC, endpoint
from tests.support.ledger import set_balance
from tests.support.long_way import lease_runs_out, ready, record, row
from tests.support.orders import approve, orders_of
from tests.support.people import person, sms

LEASE = 30.0


def now() -> datetime:
    return datetime.now(UTC)


def code(rid: int) -> int:
    got = otp.request(42, rid, "sms", now())
    assert got is not None
    return got.notification_id


def page(nid: int) -> dict[str, Any]:
    m = message_page(42, nid, now())
    assert m is not None
    return m


def pause_actions(lane: str) -> list[tuple[str, str, datetime]]:
    with get_engine().connect() as c:
        return [(str(r.actor_ref), str(r.action), r.at) for r in c.execute(sa.text(
            "SELECT actor_ref, action, at FROM operator_actions WHERE target = :t ORDER BY id"), {"t": f"lane {lane}"})]


def due_in(nid: int, seconds: float) -> None:
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now() + make_interval(secs => :s) "
                          "WHERE id = :i"), {"s": seconds, "i": nid})


def test_a_code_in_a_paused_lane_waits_with_since_and_who_never_being_sent_now(db):
    """The reported bug: a code 3 minutes old, 0 attempts, critical lane paused read "QUEUED — being sent now", its
    next retry in the past. Now: "waiting: lane paused since HH:MM UTC by pat", next try "when the lane is resumed";
    and the claim agrees: nothing claims it while the lane is paused."""
    rid, _ = person(cap=None)
    nid = code(rid)
    due_in(nid, -180)
    set_lane_paused("critical", True, actor_ref="operator:pat", note="provider incident")
    try:
        (_, _, at), = pause_actions("critical")
        m = page(nid)
        assert m["status"] == "QUEUED" and m["attempts"] == 0
        assert m["answer"].startswith(f"waiting: lane paused since {at.astimezone(UTC):%H:%M} UTC by pat"), m["answer"]
        assert "being sent now" not in m["answer"]
        assert m["state"]["kind"] == "waiting_paused" and m["state"]["by"] == "pat"
        assert m["state"]["next_try"] == "when the lane is resumed"
        assert long_way.claim(nid, LEASE, now(), "w") is None, "the read model says what the claim does"
    finally:
        set_lane_paused("critical", False, actor_ref="operator:pat", note="resolved")
    assert page(nid)["state"]["kind"] == "overdue", "resumed, nothing holds it: it is overdue, and says by how much"


def test_a_pause_is_dated_from_the_first_pause_after_the_last_resume(db):
    """Pausing twice keeps the first pause's time and person; a pause after a resume is a new pause."""
    rid, _ = person(cap=None)
    nid = code(rid)
    set_lane_paused("critical", True, actor_ref="operator:pat")
    set_lane_paused("critical", False, actor_ref="operator:pat")
    set_lane_paused("critical", True, actor_ref="cli:alice")
    set_lane_paused("critical", True, actor_ref="operator:bob")  # paused again while paused: still alice's pause
    try:
        since = pause_actions("critical")[2][2]
        s = owed_states([nid], now(), 42)[nid]
        assert (s.kind, s.by, s.since) == ("waiting_paused", "cli:alice", since), s
    finally:
        set_lane_paused("critical", False, actor_ref="operator:pat")


def test_an_open_breaker_says_until_when_and_the_claim_defers_to_then(db, redis_db):
    e = endpoint(42, PUBLIC)
    first = approve(orders_of(42)[0])
    with get_engine().begin() as c:
        nid = c.execute(sa.text("SELECT id FROM notifications WHERE event_id = :e AND endpoint_id = :i"),
                        {"e": first.event_id, "i": e["id"]}).scalar_one()
        until = c.execute(sa.text(
            "UPDATE webhook_endpoints SET breaker_open_until = now() + interval '90 seconds', failure_streak = 5 "
            "WHERE id = :i RETURNING breaker_open_until"), {"i": e["id"]}).scalar_one()
    s = owed_states([nid], now(), 42)[nid]
    assert s.kind == "waiting_breaker" and s.until == until
    assert s.text.startswith(f"waiting: endpoint's breaker open until {until.astimezone(UTC):%H:%M:%S} UTC"), s.text
    assert f"endpoint {e['id']} failed 5 times in a row" in s.text
    held = long_way.claim(nid, LEASE, now(), "w")
    assert isinstance(held, plan.Deferred) and held.until == until, held
    after = owed_states([nid], now(), 42)[nid]
    assert after.kind == "waiting_breaker" and after.until == until, "deferred: it still says what holds it"


def test_a_short_balance_says_since_when_it_stayed_short_and_the_claim_does_not_send(db):
    """Since = the entry after which the balance stayed below the price: a small refund that leaves it short does
    not move it; the message's price and what is left are said."""
    rid, _ = person(cap=None)
    set_balance(42, 2)  # short of an SMS (5) from here on
    with get_engine().connect() as c:
        short_at = c.execute(sa.text("SELECT max(created_at) FROM balance_entries WHERE tenant_id = 42")).scalar_one()
    set_balance(42, 3)  # a little back, still short
    nid = sms(rid, "balance")
    s = owed_states([nid], now(), 42)[nid]
    assert s.kind == "waiting_balance" and s.since == short_at, (s, short_at)
    assert s.text.startswith(f"waiting: balance too low (0.03 left, this message costs 0.05) since "
                             f"{short_at.astimezone(UTC):%H:%M} UTC"), s.text
    set_balance(42, 0)
    empty = owed_states([nid], now(), 42)[nid]
    assert empty.text.startswith("waiting: balance empty since") and empty.since == short_at
    got = long_way.claim(nid, LEASE, now(), "w")
    assert isinstance(got, plan.Suppressed) and got.reason == "insufficient_balance", \
        "the read model said it would not go without a top-up"
    assert_invariants()


def test_quiet_hours_say_until_when_in_the_recipients_zone_and_the_claim_defers_exactly_then(db):
    rid, _ = person(cap=None)
    kolkata = now().astimezone(ZoneInfo("Asia/Kolkata"))
    start = (kolkata - timedelta(hours=1)).time().replace(minute=0, second=0, microsecond=0)
    end = (kolkata + timedelta(hours=2)).time().replace(minute=0, second=0, microsecond=0)
    update(42, rid, {"timezone": "Asia/Kolkata", "quiet_start": start, "quiet_end": end}, "test")
    nid = sms(rid, "quiet")
    s = owed_states([nid], now(), 42)[nid]
    assert s.kind == "waiting_quiet_hours"
    assert s.text.startswith(f"waiting: quiet hours until {end:%H:%M} Asia/Kolkata ("), s.text
    got = long_way.claim(nid, LEASE, now(), "w")
    assert isinstance(got, plan.Deferred) and got.until == s.until, (got, s)
    assert owed_states([nid], now(), 42)[nid].until == s.until, "deferred: the same end, not 'scheduled'"


def test_a_retry_names_the_failed_attempt_its_status_and_the_next_try(db):
    rid, _ = person(cap=None)
    nid = sms(rid, "retry")
    c = ready(nid)
    assert record(c, Retry("server_error", 120), code=503) == "retry"
    nxt = row(nid).next_attempt_at
    m = page(nid)
    assert m["state"]["kind"] == "retrying"
    t = nxt.astimezone(UTC)
    day = "" if t.date() == now().date() else f"{t:%Y-%m-%d} "  # the date only when it is not today
    assert m["answer"] == f"retrying: attempt 1 failed (503), next try at {day}{t:%H:%M:%S} UTC", m["answer"]
    assert m["state"]["next_try"] == f"{t:%Y-%m-%d %H:%M:%S} UTC"
    assert m["reason"] == "", "the failure is in the answer; not said twice"
    due_in(nid, -240)
    late = page(nid)["answer"]
    assert late == "due 4 min ago, not yet picked up (attempt 1 failed (503))", late


def test_being_sent_now_only_while_a_live_lease_holds_it(db):
    rid, _ = person(cap=None)
    nid = sms(rid, "lease")
    fresh = owed_states([nid], now(), 42)[nid]
    assert fresh.kind == "overdue" and fresh.text.endswith("not yet picked up"), fresh
    c = ready(nid)
    held = owed_states([nid], now(), 42)[nid]
    assert (held.kind, held.text) == ("sending", "being sent now")
    lease_runs_out(nid)
    lost = owed_states([nid], now(), 42)[nid]
    assert lost.kind == "overdue" and "let its lease run out at" in lost.text, lost
    assert "being sent now" not in lost.text
    again = ready(nid)
    assert record(again, Succeeded(False), "sms-ref") == "sent"
    assert record(c, Succeeded(False), "sms-ref") in ("sent", "already_recorded", "late_accept")
    m = page(nid)
    assert m["state"] is None and m["answer"] == "sent; the provider has not confirmed delivery yet", \
        "a settled row keeps the ledger's own answer"
    assert owed_states([nid], now(), 42) == {}
    assert_invariants()


def test_an_overdue_row_says_how_overdue(db):
    rid, _ = person(cap=None)
    nid = sms(rid, "late")
    due_in(nid, -180)
    m = page(nid)
    assert m["answer"] == "due 3 min ago, not yet picked up", m["answer"]
    assert m["state"]["kind"] == "overdue" and m["state"]["next_try"].startswith("was due ")
    due_in(nid, 3600)
    assert page(nid)["state"]["kind"] == "scheduled"


def test_every_page_and_the_cli_say_the_same_and_a_page_of_rows_costs_one_statement(db):
    """The message page, the recipient page, the ledger (its reason column), search and `outbox why` take the same
    words from the one read model; the ledger's page of owed rows is read in ONE statement (no N+1); another
    tenant asking gets no state."""
    rid, ref = person(cap=None)
    nids = [code(rid) for _ in range(3)] + [sms(rid, f"many-{i}") for i in range(2)]
    set_lane_paused("critical", True, actor_ref="operator:pat", note="provider incident")
    try:
        words = page(nids[0])["answer"]
        assert words.startswith("waiting: lane paused since") and words.endswith("until it is resumed")
        why = support_ledger.recipient_messages(42, rid, now())
        assert why is not None
        by_id = {m["id"]: m["answer"] for m in why["messages"]}
        assert by_id[nids[0]] == words and by_id[nids[3]].endswith("not yet picked up")

        statements: list[str] = []

        def seen(conn, cursor, statement, *args):  # type: ignore[no-untyped-def]
            statements.append(statement)

        sa.event.listen(get_engine(), "before_cursor_execute", seen)
        try:
            data = support_ledger.ledger(42, LedgerFilter(recipient=ref), now())
        finally:
            sa.event.remove(get_engine(), "before_cursor_execute", seen)
        assert sum("paused AS" in s for s in statements) == 1, "one statement for the whole page"
        reasons = {int(r["id"]): notification(r)["reason"] for r in data["rows"]}
        assert set(reasons) == set(nids) and reasons[nids[0]] == words

        (hit,) = [i for i in search(42, f"#{nids[0]}", now())["items"] if i["kind"] == "message"]
        assert hit["answer"] == words
        assert owed_states(nids, now(), tenant_id=7) == {}, "another tenant's row has no state"
        assert with_states([{"id": nids[0], "status": "SENT", "answer": "x"}], now())[0]["answer"] == "x"

        r = subprocess.run([OUTBOX, "why", ref, "--tenant", "42"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "COLUMNS": "400"})
        assert r.returncode == 0, r.stderr
        assert "waiting: lane paused since" in r.stdout and "by pat" in r.stdout, r.stdout
        assert "being sent now" not in r.stdout
    finally:
        set_lane_paused("critical", False, actor_ref="operator:pat", note="resolved")

"""The `outbox` command as operators and CI run it: real processes, real exit codes.

Invariants: `check` fails exactly when an invariant is broken and lists them in numeric order; `apikey create`
prints only the key (`scenario`: see test_jobs_drills_scenario.py).
"""

from __future__ import annotations

import os
import re

import sqlalchemy as sa

from domain.access.auth import principal_for_key
from domain.db import get_engine
from tests.support.cli import run
from tests.support.people import person
from tests.support.review import actions, failed


def test_check_passes_on_a_consistent_database_and_fails_on_a_broken_one(db):
    ok = run("check")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    shown = [int(n) for n in re.findall(r"^\W*(\d+) ", ok.stdout, re.M)]
    assert len(shown) >= 10 and shown == sorted(shown), f"invariants in numeric order (1, 2, … 10): {shown}"
    with get_engine().begin() as c:  # a revision committed behind the outbox's back
        c.execute(sa.text("UPDATE orders SET revision = revision + 1 WHERE id = 913"))
    broken = run("check")
    assert broken.returncode == 1
    assert "committed revision without outbox event" in broken.stdout


def test_apikey_create_prints_only_the_key(db):
    r = run("apikey", "create", "--tenant", "42")
    assert r.returncode == 0
    key = r.stdout.strip()
    assert "\n" not in key and principal_for_key(key).tenant_id == 42  # type: ignore[union-attr]
    bad = run("apikey", "create", "--tenant", "99")
    assert bad.returncode != 0 and bad.stdout == "" and "tenant 99 does not exist" in bad.stderr


def test_unknown_lane_is_a_clear_error(db):
    r = run("pause", "express", "--note", "x")
    assert r.returncode == 2 and "unknown lane 'express'" in r.stderr


def test_pause_and_resume_from_a_terminal_need_a_note_and_are_audited_as_the_os_user(db):
    """Invariant (issue 27, item 2): whichever door a pause comes through, one audit row says who and why. From a
    terminal with no login variables (cron, CI) the actor is still the OS account (`cli:<user>`, never
    `cli:unknown`), and a pause or resume without a note is refused and changes nothing."""
    import getpass

    from domain.delivery.lanes import lane_paused

    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME", "LNAME", "USERNAME")}
    bare = run("pause", "bulk", env=env)
    assert bare.returncode == 2 and "--note" in bare.stderr and not lane_paused("bulk")
    try:
        assert run("pause", "bulk", "--note", "provider incident INC-7", env=env).returncode == 0
        assert lane_paused("bulk")
    finally:
        assert run("resume", "bulk", "--note", "provider recovered", env=env).returncode == 0
    assert not lane_paused("bulk")
    with get_engine().connect() as c:
        kept = c.execute(sa.text("SELECT actor_ref, action, note FROM operator_actions "
                                 "WHERE action IN ('pause', 'resume') ORDER BY id")).all()
    who = f"cli:{getpass.getuser()}"
    assert [tuple(k) for k in kept] == [(who, "pause", "provider incident INC-7"),
                                        (who, "resume", "provider recovered")]
    assert "unknown" not in who


def test_why_answers_for_a_recipient_and_refuses_an_unknown_one(db):
    """`outbox why` prints the cross-channel answers and each message's answer; an unknown ref is a clear error."""
    from datetime import UTC, datetime

    from domain.ledger.recipients import find_by_ref, update
    from domain.ledger.send import send

    ((tenant, rid),) = find_by_ref(42, "cust-001")
    update(tenant, rid, {"opted_out_channels": ["sms"]}, "support:dana")
    row = send(tenant_id=42, recipient_id=rid, channel="sms", template="offer", lane="normal",
               data={"headline": "hi"}, subject_period=f"{datetime.now(UTC):%Y-%m-%d}")
    assert row is not None
    r = run("why", "cust-001", "--tenant", "42")
    assert r.returncode == 0, r.stderr
    assert "heard from us" in r.stdout and "offer" in r.stdout
    missing = run("why", "nobody-at-all")
    assert missing.returncode == 2 and "no recipient 'nobody-at-all'" in missing.stderr


def test_why_takes_everything_search_takes(db):
    """Invariant (issue 27, item 6): `outbox why` reads its query as search does — a phone in any spelling, an
    email, a name, a message's `#id`, job id or provider reference, an order number (its customer) — and answers for
    the recipient it leads to, saying how it was found; it never echoes a contact point; another tenant's id is
    exactly a missing one; a query that cannot be one is a clear error."""
    from datetime import UTC, datetime

    from domain.delivery import long_way, plan
    from domain.delivery.retry import Succeeded
    from domain.ledger.recipients import find_by_ref
    from domain.ledger.send import send

    ((tenant, rid),) = find_by_ref(42, "cust-001")  # no quiet hours: the claim sends whatever the hour
    with get_engine().connect() as c:
        phone = str(c.execute(sa.text("SELECT phone FROM recipients WHERE id = :i"), {"i": rid}).scalar_one())
    row = send(tenant_id=tenant, recipient_id=rid, channel="email", template="offer", lane="normal",
               data={"headline": "hi"}, subject_period="why-anything")
    assert row is not None
    claim = long_way.claim(row.notification_id, 30, datetime.now(UTC), "t")
    assert isinstance(claim, plan.Ready)
    long_way.record(claim.claim, Succeeded(False), worker="t", started=datetime.now(UTC), status_code=201,
                    latency_ms=9.0, provider_reference="email-why-0001", excerpt="{}")
    nid = row.notification_id
    for q, how in ((f"{phone[:5]} {phone[5:8]}-{phone[8:]}", "found by phone"),
                   ("CUST-001@example.test", "found by email"), ("cust-001", "found by ref"),
                   (f"#{nid}", f"recipient of message #{nid} (message id)"),
                   (f"n-{nid}", f"recipient of message #{nid} (message id)"),
                   ("email-why-0001", f"recipient of message #{nid} (provider reference)")):
        r = run("why", q, "--tenant", "42")
        assert r.returncode == 0, (q, r.stderr)
        assert how in r.stdout and "(cust-001, tenant 42" in r.stdout and str(nid) in r.stdout, (q, r.stdout)
        assert phone[-7:] not in r.stdout + r.stderr and "cust-001@" not in (r.stdout + r.stderr).lower(), q
    every = run("why", "email-why-0001")  # no --tenant: every tenant, on-call's default
    assert every.returncode == 0 and "(cust-001, tenant 42" in every.stdout, every.stderr
    order = run("why", "#913", "--tenant", "42")
    assert order.returncode == 0 and "customer of order 913" in order.stdout and "(cust-001, tenant 42" in order.stdout
    for q in (f"#{nid}", "email-why-0001", phone):  # tenant 42's, asked in tenant 7
        theirs = run("why", q, "--tenant", "7")
        assert theirs.returncode == 2 and "no recipient" in theirs.stderr, q
    foreign, missing = run("why", f"n-{nid}", "--tenant", "7"), run("why", f"n-{2**31 - 1}", "--tenant", "7")
    assert (foreign.returncode, foreign.stdout) == (missing.returncode, missing.stdout) == (2, "")
    assert foreign.stderr.replace(str(nid), "N") == missing.stderr.replace(str(2**31 - 1), "N")
    phone = run("why", "+49 170 0000000")
    assert phone.returncode == 2 and "no recipient for that phone" in phone.stderr and "170" not in phone.stderr
    refused = run("why", " ")
    assert refused.returncode == 2 and "type a ref" in refused.stderr


def test_status_shows_balances_and_scheduled_work_apart(db):
    r = run("status")
    assert r.returncode == 0, r.stderr
    assert "balances" in r.stdout and "Northwind Retail" in r.stdout and "scheduled" in r.stdout


def test_messages_lists_the_ledger_as_a_table_or_json_with_filters(db, monkeypatch):
    """`outbox messages` shows the ledger newest first (a table; `--json` for scripts) filtered by status, lane,
    since and tenant; a bad filter is a clear error (exit 2) and prints no rows."""
    import json
    from datetime import UTC, datetime

    from domain.ledger.recipients import find_by_ref
    from domain.ledger.send import send

    monkeypatch.setenv("COLUMNS", "250")  # rich wraps a table to the terminal; a pipe counts as 80 columns
    ((tenant, rid),) = find_by_ref(42, "cust-002")
    made = [send(tenant_id=tenant, recipient_id=rid, channel="email", template="offer", lane="bulk",
                 data={"headline": "cli"}, subject_period=f"cli-{n}-{datetime.now(UTC):%H%M%S%f}") for n in range(2)]
    r = run("messages", "--lane", "bulk", "--status", "queued", "--since", "10m", "--tenant", "42", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [m["id"] for m in listed] == sorted((m.notification_id for m in made), reverse=True)  # type: ignore[union-attr]
    assert all(m["lane"] == "bulk" and m["tenant_id"] == 42 for m in listed)
    assert "@" not in r.stdout and "+1555" not in r.stdout, "recipients by ref, no contact point"
    table = run("messages", "--lane", "bulk", "--tenant", "42")
    assert table.returncode == 0 and "messages (" in table.stdout and "cust-002" in table.stdout
    for bad in (("--status", "LOST"), ("--lane", "express"), ("--since", "yesterday")):
        refused = run("messages", *bad)
        assert refused.returncode == 2 and refused.stdout == "" and "error" in refused.stderr, bad


def test_replay_and_resolve_act_once_and_are_audited_as_the_cli_user(db):
    """`outbox replay ID…` queues FAILED rows again and `outbox resolve ID… --note` marks them resolved, each kept
    in operator_actions as `cli:<user>` with the note; a second replay changes nothing; replay or resolve without a
    note is refused and changes nothing."""
    rid, _ = person(cap=None)
    a, b, c = failed(rid), failed(rid), failed(rid)
    import getpass

    env_user = getpass.getuser()  # the OS account (cli_actor), also where no login variable is set (CI)
    r = run("replay", str(a), str(b), "--note", "receiver fixed")
    assert r.returncode == 0, r.stderr
    assert f"#{a}" in r.stdout and f"#{b}" in r.stdout
    assert actions([a, b], "replay") == [(f"cli:{env_user}", f"notification {i}", "receiver fixed") for i in (a, b)]
    no_why = run("replay", str(a))
    assert no_why.returncode == 2 and "--note" in no_why.stderr and len(actions([a, b], "replay")) == 2
    again = run("replay", str(a), "--note", "once more")
    assert again.returncode == 0 and again.stdout == "" and f"#{a}" in again.stderr, "nothing changed, and it says so"
    assert len(actions([a, b], "replay")) == 2
    no_note = run("resolve", str(c))
    assert no_note.returncode != 0 and actions([c], "resolve") == []
    done = run("resolve", str(c), "--note", "refunded by phone")
    assert done.returncode == 0 and f"#{c}" in done.stdout
    assert actions([c], "resolve") == [(f"cli:{env_user}", f"notification {c}", "refunded by phone")]
    assert run("replay", "0").returncode == 2

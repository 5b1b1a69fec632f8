"""Structured logs across real processes (API, relay, lane workers, receiver), read from their log files.

Invariants: every process writes JSON lines; one order event is followed across processes with one grep of its
event id — the API's line carries tenant and request id, the worker's tenant, event id, notification id, lane and
attempt, the receiver's the event id; and no one-time code, API key, webhook secret, phone number or e-mail
address is in any of them (a code and a webhook are driven through the system while we look).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from domain.access.auth import create_api_key
from domain.db import get_engine
from domain.delivery.wakeups import batched
from domain.ledger import otp
from domain.settings import get_settings
from jobs.ops.procs import ROOT
from tests.conftest import SLOT_SUFFIX
from tests.integration.conftest import API, rows, wait_for

LOGS = ROOT / ".run" / f"test-logs{SLOT_SUFFIX}"


def _marks() -> dict[Path, int]:
    return {p: p.stat().st_size for p in LOGS.glob("*.log")}


def _new_lines(marks: dict[Path, int]) -> dict[str, list[str]]:
    """Each log file's lines written since `marks` (the files are shared by the whole session)."""
    out: dict[str, list[str]] = {}
    for p in LOGS.glob("*.log"):
        with p.open("rb") as f:
            f.seek(marks.get(p, 0))
            out[p.stem] = f.read().decode(errors="replace").splitlines()
    return out


def _json(line: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def test_one_event_is_followed_across_processes_by_its_id_in_json_lines(sys_):
    """Invariant: grep <event id> finds JSON lines of the API, a worker and the receiver, with the fields that
    tie them together. On a batched lane the worker's line is its batch's ("batch recorded"), naming every row
    and event id of the batch; on the per-row path it is the row's own ("attempt recorded")."""
    marks = _marks()
    for lane in ("high", "normal"):
        sys_.start_worker(lane)
    rid = f"req-logs-{uuid.uuid4().hex[:12]}"
    headers = {"Authorization": f"Bearer {create_api_key(42, 'test:logs')}", "X-Request-Id": rid}
    r = httpx.post(f"{API}/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": rid},
                   headers=headers)
    assert r.status_code == 200, r.text
    event_id = r.json()["event_id"]
    (hook,) = wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status IN ('SENT', 'DELIVERED')",
                                    e=event_id) or None, 30, "the webhook to be sent")

    def written() -> bool:  # the worker logs its attempt just after the row says SENT
        text = "\n".join(line for ls in _new_lines(marks).values() for line in ls if event_id in line)
        return '"process": "receiver"' in text and (
            '"event": "attempt recorded"' in text or '"event": "batch recorded"' in text)

    wait_for(lambda: written() or None, 10, "the receiver's and the worker's lines")
    lines = _new_lines(marks)
    hits = [(name, _json(line)) for name, ls in lines.items() for line in ls if event_id in line]
    assert hits and all(parsed is not None for _, parsed in hits), "every line naming the event is JSON"
    by_process = {p["process"]: p for _, p in hits if p}
    assert {"api", "receiver"} <= set(by_process) and any(k.startswith("worker:") for k in by_process), by_process
    api = next(p for _, p in hits if p and p["process"] == "api" and p.get("event") == "order event committed")
    assert api["tenant"] == 42 and api["request_id"] == rid and hook.id in api["notification_ids"]
    if batched(hook.lane):
        worker = next(p for _, p in hits if p and p["process"].startswith("worker:") and p.get("event") ==
                      "batch recorded" and hook.id in p.get("notification_ids", []))
        assert (42 in worker["tenants"], event_id in worker["event_ids"], worker["lane"]) == (True, True, hook.lane)
        assert worker["claimed"] >= 1 and worker["level"] == "info"
    else:
        worker = next(p for _, p in hits if p and p["process"].startswith("worker:") and p.get("event") ==
                      "attempt recorded" and p.get("notification_id") == hook.id)
        assert (worker["tenant"], worker["event_id"], worker["lane"], worker["request_id"]) == (42, event_id,
                                                                                               hook.lane, rid)
        assert worker["attempt"] >= 1 and worker["level"] == "info"
    assert any(p and p["process"] == "receiver" and p.get("event") == "webhook" for _, p in hits)
    request = [p for p in map(_json, lines["api"]) if p and p.get("event") == "request" and p.get("request_id") == rid]
    assert request and request[0]["status"] == 200 and request[0]["tenant"] == 42
    # The relay writes JSON lines too (its start line is in the session's file, before our mark).
    relay = [_json(line) for line in (LOGS / "relay.log").read_text(errors="replace").splitlines() if line.strip()]
    assert relay and any(p and p.get("process") == "relay" for p in relay)


@pytest.mark.timeout(300)  # its set-up starts the session's services: 120 s under load was not enough
def test_no_code_key_secret_or_contact_point_reaches_any_log(sys_):
    """Invariant: with a one-time code and a webhook driven through every process, no log line holds the code,
    the API key, a signing secret, or any recipient's phone number or e-mail address."""
    marks = _marks()
    for lane in ("critical", "high", "normal"):
        sys_.start_worker(lane)
    api_key = create_api_key(42, "test:logs")
    headers = {"Authorization": f"Bearer {api_key}"}
    made = httpx.post(f"{API}/api/v1/recipients", headers=headers, json={
        "ref": f"logs-{uuid.uuid4().hex[:8]}", "display_name": "Log Probe", "phone": "+919812345678",
        "email": "log.probe@example.org", "timezone": "UTC"})
    assert made.status_code == 201, made.text
    recipient = made.json()["recipient_id"]
    asked = httpx.post(f"{API}/api/v1/otp", json={"recipient_id": recipient, "channel": "sms"}, headers=headers)
    assert asked.status_code == 201, asked.text
    nid = int(asked.json()["notification_id"])
    approved = httpx.post(f"{API}/api/v1/orders/913/approve", json={"expected_revision": 17, "request_id": "r-l"},
                          headers=headers)
    assert approved.status_code == 200
    wait_for(lambda: rows("id = :i AND status IN ('SENT', 'DELIVERED')", i=nid) or None, 30, "the code")
    wait_for(lambda: rows("event_id = :e AND channel = 'webhook' AND status IN ('SENT', 'DELIVERED')",
                          e=approved.json()["event_id"]) or None, 30, "the webhook")
    with get_engine().connect() as c:
        code = otp.derive_code(c.execute(sa.text("SELECT nonce FROM otp_codes WHERE notification_id = :n"),
                                         {"n": nid}).scalar())
        contacts = [v for r in c.execute(sa.text("SELECT phone, email FROM recipients")) for v in r if v]
    text = "\n".join(line for ls in _new_lines(marks).values() for line in ls)
    assert str(nid) in text, "the code's message was logged (by id) while we looked"
    s = get_settings()
    for secret, what in [(api_key, "API key"), (s.webhook_secret, "webhook secret"),
                         (s.receipt_secret, "receipt secret"), (s.otp_secret, "OTP secret")]:
        assert secret and secret not in text, f"{what} in a log line"
    assert api_key[8:20] not in text
    assert not re.search(rf"(?<![\d.]){code}(?!\d)", text), "the one-time code is in a log line"
    leaked = [c for c in contacts if c in text]
    assert not leaked and "+919812345678" in contacts and "log.probe@example.org" in contacts, leaked


def test_the_relay_names_each_wake_up_by_notification_and_event_id(sys_):
    """Invariant: a wake-up the relay enqueues (here: an order event committed with no after-commit enqueue, so only
    the relay's NOTIFY-woken scan can deliver its rows) is one JSON line of the relay naming the notification id,
    its event id, tenant and lane — so `grep <event id>` follows an event through the relay too — and no contact
    point is in it. A batched lane's line ("lane woken") names the oldest owed row that woke it, its event id and
    tenant the same way."""
    from domain.orders.commands import Committed, execute_order_command

    marks = _marks()
    done = execute_order_command(tenant_id=42, order_id=913, command="approve", expected_revision=17,
                                 actor_ref="test:logs", request_id="req-relay-log")
    assert isinstance(done, Committed)
    event_id = str(done.event_id)
    owed = {r.id: r for r in rows("event_id = :e AND status = 'QUEUED' AND next_attempt_at <= now()",
                                  e=done.event_id)}
    assert owed, "the approval ledgered messages"

    def relay_lines() -> list[dict[str, Any]] | None:
        found = [p for p in map(_json, _new_lines(marks).get("relay", []))
                 # A batched lane's wake-up names the lane and the owed row that woke it (here the lane's only one).
                 if p and p.get("event") in ("wake-up enqueued", "lane woken") and p.get("event_id") == event_id]
        return found if {p["notification_id"] for p in found} >= set(owed) else None

    lines = wait_for(relay_lines, 20, "the relay's wake-up line for every row of the event")
    for line in lines:
        row = owed[line["notification_id"]]
        assert (line["process"], line["tenant"], line["lane"]) == ("relay", 42, row.lane), line
        assert "@" not in json.dumps(line) and "+1555" not in json.dumps(line), line

"""What the webhook endpoints page says: each endpoint's row in words — its state, its rotation, its breaker, its
health over 24 h, its latest attempts (`reasons.attempt_text`), its latest test event and its last action from the
audit log — read at a keyset position (`read_rows`, blocking: run it on a thread), and each action's confirmation:
its question and, in plain words, what follows.
"""

from __future__ import annotations

from typing import Any

from dashboard.format import done_line, when
from domain.endpoints import store
from domain.ledger.reasons import attempt_text
from domain.orders import trial
from domain.support import pages

PAGE_SIZE = 50
ATTEMPTS_SHOWN = 3
# Each action asked before it happens: its question and, in plain words, what follows.
CONFIRM = {
    "disable": ("Disable {name}?", "It receives no more events until someone enables it again: events already owed "
                                   "to it are not sent, and the receiver's system stops hearing about orders."),
    "enable": ("Enable {name}?", "It receives this tenant's events again from now on, signed with its current "
                                 "secret."),
    "rotate": ("Rotate the signing secret of {name}?",
               "A new secret is made and shown once. The old one keeps signing beside it for 24 hours; after that, "
               "a receiver that still checks only the old secret rejects every event. Copy the new one to the "
               "receiver before then."),
    "delete": ("Delete {name}?", "It is gone for good and receives nothing more; events owed to it are not sent. "
                                 "This cannot be undone: to receive events again, add a new endpoint (with a new "
                                 "secret)."),
}
LABEL = {"disable": "Disable", "enable": "Enable", "rotate": "Rotate secret", "delete": "Delete"}
# The audit log's words, as the row says them.
DONE = {"create webhook endpoint": "Added", "disable webhook endpoint": "Disabled",
        "enable webhook endpoint": "Enabled", "rotate webhook endpoint secret": "Secret rotated",
        trial.ACTION: "Test event sent"}
TEST_STATE = {"DELIVERED": "delivered", "SENT": "delivered", "FAILED": "failed", "SUPPRESSED": "not sent"}


def _health(h: dict[str, Any]) -> tuple[str, str]:
    """("97% of 120 attempts in 24 h", "last success … · last error: the receiver had a server error at …")."""
    rate = "no attempts in 24 h" if h["success_rate_24h"] is None else \
        f"{h['success_rate_24h']:.0%} of {h['attempts_24h']} attempts in 24 h"
    last = [f"last success {when(h['last_success_at'])}" if h["last_success_at"] else "no success yet"]
    if h["last_error"]:
        words = attempt_text(h.get("last_error_status"), h["last_error"], h.get("last_error_excerpt"))
        last.append(f"last error: {words} at {when(h['last_error_at'])}")
    return rate, " · ".join(last)


def attempt_line(a: dict[str, Any]) -> str:
    """"outbox.test at 20:31:02: HTTP 401 — the endpoint refused our signature …" (an accepted one: "accepted")."""
    code = f"HTTP {a['status_code']}" if a["status_code"] is not None else "no answer"
    words = attempt_text(a["status_code"], a["error_class"], a["response_excerpt"])
    return f"{a['template']} at {when(a['started_at'])}: {code} — {words or 'accepted'}"


def test_line(t: dict[str, Any] | None) -> str:
    """The latest test event's state: on its way, retrying after an error, delivered, failed."""
    if not t:
        return ""
    if t["status"] == "QUEUED":
        if t["last_error_class"]:
            return f"Test event (message {t['id']}): retrying at {when(t['next_attempt_at'])}"
        return f"Test event (message {t['id']}): on its way"
    return f"Test event (message {t['id']}): {TEST_STATE.get(str(t['status']), str(t['status']).lower())}"


def _row(e: dict[str, Any], done: dict[str, Any] | None = None, attempts: list[dict[str, Any]] | None = None,
         test: dict[str, Any] | None = None) -> dict[str, str]:
    rate, last = _health(e["health"])
    return {"id": str(e["id"]), "url": str(e["url"]), "description": str(e["description"] or ""),
            "types": ", ".join(e["event_types"]) if e["event_types"] else "every event",
            "state": "enabled" if e["enabled"] else "disabled",
            "rotating": f"old secret signs until {when(e['rotating_until'])}" if e["rotating_until"] else "",
            "why": "" if e["enabled"] else str(e["disabled_reason"] or ""),
            "breaker": f"failing: sends held until {when(e['breaker_open_until'])} (circuit breaker)"
                       if e["breaker_open_until"] else "",
            "rate": rate, "last": last,
            "attempts": "\n".join(attempt_line(a) for a in attempts or []),
            "test": test_line(test), "test_message": str(test["id"]) if test else "",
            "done": done_line(DONE.get(str(done["action"]), str(done["action"])), done) if done else ""}


def read_rows(tenant_id: int, before: int, after: int) -> tuple[list[dict[str, str]], bool, bool]:
    """The page's rows at a position (blocking: run it on a thread, never under the state lock)."""
    page = pages.endpoints(tenant_id, PAGE_SIZE, before or None, after or None)
    ids = [int(e["id"]) for e in page.rows]
    last = store.last_actions(tenant_id, ids)
    # The test event's row first, then the attempts: a test read as answered has its attempt line committed in the
    # same transaction, so the later read shows it (read the other way round, a record committing between the two
    # showed "delivered" with no attempt, and the watcher, its test answered, never read again).
    tests = store.latest_tests(tenant_id, ids)
    attempts = store.latest_attempts(tenant_id, ids, ATTEMPTS_SHOWN)
    return ([_row(e, last.get(int(e["id"])), attempts.get(int(e["id"])), tests.get(int(e["id"])))
             for e in page.rows], page.has_older, page.has_newer)

"""Invariant: every answer a tenant's endpoint can give reads in plain words that say what to do — 401/403 is our
signature or credentials refused (check the secret), never "rejected as invalid"; 404, 410, 429, 5xx, a timeout, a
TLS failure, a name that does not resolve and a refused connection each have their own sentence; an accepted answer
needs none. One mapping (`reasons.attempt_text`) for the endpoint page and the message page."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.ledger.reasons import attempt_text
from domain.support.message import _attempt


@pytest.mark.parametrize(("code", "error_class", "excerpt", "words"), [
    (401, "contract", '{"error":"bad_signature"}', "refused our signature or credentials (HTTP 401)"),
    (403, "contract", None, "refused our signature or credentials (HTTP 403)"),
    (404, "contract", None, "URL was not found (HTTP 404)"),
    (410, "contract", None, "says it is gone (HTTP 410)"),
    (429, "rate_limited", None, "asked us to slow down (HTTP 429)"),
    (503, "server_error", None, "server error (HTTP 503) — we retry"),
    (422, "contract", None, "rejected the request as invalid (HTTP 422)"),
    (409, "identity_conflict", None, "different body for this event id (HTTP 409)"),
    (None, "timeout", None, "did not answer in time"),
    (None, "connection", "ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
     "TLS handshake with the endpoint failed"),
    (None, "url_not_allowed", "refused before sending: hooks.example.invalid does not resolve",
     "host name does not resolve (DNS)"),
    (None, "connection", "the endpoint's name did not resolve within 5 s", "host name does not resolve (DNS)"),
    (None, "connection", "ConnectError: [Errno 111] Connection refused", "could not be reached"),
    (None, "url_not_allowed", "refused before sending: x resolves to a private address", "private address"),
])
def test_each_answer_has_its_own_plain_words(code, error_class, excerpt, words):  # type: ignore[no-untyped-def]
    assert words in attempt_text(code, error_class, excerpt)


def test_a_refused_signature_says_check_the_secret_and_an_accepted_answer_needs_no_words():
    text = attempt_text(401, "contract", '{"error":"bad_signature"}')
    assert "secret" in text and "invalid" not in text
    assert attempt_text(200, None, '{"status":"accepted"}') == ""
    assert attempt_text(204, None, None) == ""


def test_the_message_page_says_a_webhook_attempt_in_the_same_words():
    now = datetime.now(UTC)
    a = {"started_at": now, "finished_at": now, "status_code": 401, "error_class": "contract",
         "response_excerpt": '{"error":"bad_signature"}'}
    assert _attempt(a, webhook=True)["error_text"] == attempt_text(401, "contract", '{"error":"bad_signature"}')
    assert _attempt(a, webhook=False)["error_text"] == "the receiver rejected the request as invalid", \
        "a provider's answer keeps the provider's words"

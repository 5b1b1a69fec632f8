"""Plain words for every reason the ledger records: the one place the dashboard, the audit timeline and the CLI
take them from. "Why didn't they get it?" is answered here, never by a code like `daily_cap`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

SUPPRESSED: Final[dict[str, str]] = {
    "daily_cap": "Not sent: the recipient already reached today's message cap.",
    "opted_out": "Not sent: the recipient opted out of this channel.",
    "no_longer_eligible": "Not sent: by send time the order was no longer in the state this message is about.",
    "superseded": "Not sent: a later step replaced this nudge.",
    "no_contact_point": "Not sent: we hold no address for this recipient on this channel.",
    "insufficient_balance": "Not sent: the tenant's prepaid balance could not cover this message.",
    "campaign_cancelled": "Not sent: the campaign was cancelled before this message went out.",
    "endpoint_disabled": "Not sent: the webhook endpoint it was for was disabled.",
    "endpoint_deleted": "Not sent: the webhook endpoint it was for was deleted.",
    "code_expired": "Not sent: the one-time code had expired before it could go out.",
}

ERROR_CLASS: Final[dict[str, str]] = {
    "timeout": "the receiver did not answer in time",
    "connection": "the receiver could not be reached",
    "rate_limited": "the receiver asked us to slow down",
    "server_error": "the receiver had a server error",
    "contract": "the receiver rejected the request as invalid",
    "identity_conflict": "the receiver already holds a different body for this event id",
    "unknown": "an unexpected answer",
    "undeliverable": "the provider could not deliver it (refunded)",
    "url_not_allowed": "the endpoint's address was refused at send time (it is, or resolves to, a private address)",
}


# The same reasons in a few words, for a count beside them ("4,619 not sent: campaign cancelled") and for the
# command line's narrow columns. SUPPRESSED says each as a sentence.
SUPPRESSED_SHORT: Final[dict[str, str]] = {
    "daily_cap": "daily cap reached",
    "opted_out": "opted out",
    "no_longer_eligible": "no longer eligible",
    "superseded": "replaced by a later step",
    "no_contact_point": "no address on this channel",
    "insufficient_balance": "balance too low",
    "campaign_cancelled": "campaign cancelled",
    "endpoint_disabled": "endpoint disabled",
    "endpoint_deleted": "endpoint deleted",
    "code_expired": "code expired",
}

# Why a journey event changed nothing (domain/journeys/decide.py's Drop reasons).
DROPPED: Final[dict[str, str]] = {
    "late": "late: older than the step the lead already reached",
    "not_further": "not further: a repeat of, or a step back from, the step the lead already reached",
}


def _plain(code: str) -> str:
    """A code no table knows yet, still readable: `some_new_code` → "some new code"."""
    return code.replace("_", " ")


def suppressed_short(reason: str | None) -> str:
    return SUPPRESSED_SHORT.get(reason or "", _plain(reason or ""))


def suppressed_counts(counts: Mapping[str, int]) -> str:
    """A campaign's suppressed rows by reason, in words, most first: "4,619 not sent: campaign cancelled;
    12 not sent: opted out" ("" when none)."""
    return "; ".join(f"{int(n):,} not sent: {suppressed_short(code)}"
                     for code, n in sorted(counts.items(), key=lambda kv: (-int(kv[1]), kv[0])) if int(n))


def dropped_text(reason: str | None) -> str:
    """A dropped journey event's reason in words ("" when none)."""
    return DROPPED.get(reason or "", _plain(reason or ""))


def code_expired(expires_at: datetime) -> str:
    """A `code_expired` row's detail: "the code had expired at 10:42 UTC" (shown as "Not sent: …")."""
    return f"the code had expired at {expires_at.astimezone(UTC):%H:%M} UTC"


def code_outlived(expires_at: datetime) -> str:
    """The detail of a code whose next try would have come due after its end of life (settled at the record)."""
    return f"the code expired at {expires_at.astimezone(UTC):%H:%M} UTC, before its next try was due"


def suppressed_text(reason: str | None) -> str:
    return SUPPRESSED.get(reason or "", f"Not sent: {_plain(reason)}." if reason else "")


def error_text(error_class: str | None) -> str:
    """An attempt's or a row's error class in words; a suppressing attempt records its suppression reason there."""
    code = error_class or ""
    return ERROR_CLASS.get(code) or SUPPRESSED_SHORT.get(code) or _plain(code)


def entry_reason(reason: str | None) -> str:
    """A balance entry's reason as the pages print it: a refund that names a code ("refund: contract",
    "refund: no_contact_point") says it in words; anything else (a template, a payment reference) as written."""
    text = reason or ""
    head, sep, code = text.partition(": ")
    if sep and head == "refund" and (code in ERROR_CLASS or code in SUPPRESSED_SHORT):
        return f"refund: {error_text(code)}"
    return text


_TLS = ("ssl", "tls", "certificate", "handshake")
_DNS = ("does not resolve", "name or service not known", "nodename nor servname", "getaddrinfo",
        "temporary failure in name resolution", "no address associated", "did not resolve")


def attempt_text(status_code: int | None, error_class: str | None, excerpt: str | None = None) -> str:
    """What one attempt's answer means, in plain words, and what to do about it: the one mapping the endpoint page
    and the message page both show ('' for an answer that needs none: accepted). By HTTP status first (401/403: our
    signature or credentials refused; 404; 410; 429; 5xx; other 4xx), then, with no answer, by what failed: the
    deadline, TLS, DNS, the connection, an address refused at send time. Pure."""
    e = (excerpt or "").lower()
    if status_code is not None:
        code = status_code
        if 200 <= code < 300:
            return ""
        if code in (401, 403):
            return (f"the endpoint refused our signature or credentials (HTTP {code}) — check that it verifies "
                    "with this endpoint's current signing secret (after a rotation, the new one)")
        if code == 404:
            return f"the endpoint's URL was not found (HTTP {code}) — check the path"
        if code == 410:
            return (f"the endpoint says it is gone (HTTP {code}) — if it no longer exists, disable or delete it: "
                    "new events keep going to it until then")
        if code == 409:
            return f"{ERROR_CLASS['identity_conflict']} (HTTP {code})"
        if code == 429:
            return f"{ERROR_CLASS['rate_limited']} (HTTP {code}) — we retry later"
        if code >= 500:
            return f"the receiver had a server error (HTTP {code}) — we retry"
        if 400 <= code < 500:
            return f"the receiver rejected the request as invalid (HTTP {code})"
        return f"{ERROR_CLASS['unknown']} (HTTP {code})"
    if error_class == "timeout":
        return "the endpoint did not answer in time — we retry (check it answers within a few seconds)"
    if error_class in ("connection", "url_not_allowed") and any(w in e for w in _DNS):
        return "the endpoint's host name does not resolve (DNS) — check the host name"
    if error_class == "connection" and any(w in e for w in _TLS):
        return "the TLS handshake with the endpoint failed (certificate or protocol) — check its HTTPS certificate"
    if error_class == "connection":
        return "the endpoint could not be reached (connection refused or dropped) — we retry"
    return error_text(error_class)


def ledger_reason(n: Mapping[str, Any]) -> str:
    """Why a ledger row is where it is, in one sentence ('' when nothing needs explaining)."""
    if n.get("status") == "SUPPRESSED":
        if n.get("reason_detail"):
            return f"Not sent: {n['reason_detail']}."
        return suppressed_text(n.get("suppressed_reason"))
    if n.get("status") == "QUEUED" and n.get("reason_detail"):
        return f"Not sent yet: {n['reason_detail']}."
    if n.get("review") == "needs_review":
        return f"Needs review: {error_text(n.get('last_error_class')) or 'permanent failure'}"
    if n.get("last_error_class"):
        return f"Last error: {error_text(n['last_error_class'])}"
    return ""


def effect_text(effect_ref: str, last_outcome: str | None) -> str:
    again = " (a redelivery was answered already_processed)" if last_outcome == "already_processed" else ""
    return f"receiver applied the customer webhook once: {effect_ref}{again}"


CHANNEL_NAME: Final[dict[str, str]] = {"sms": "SMS", "email": "email", "whatsapp": "WhatsApp", "webhook": "webhook"}


def message_answer(n: Mapping[str, Any], now: datetime) -> str:
    """One message's answer to "did they get it?", in plain words, for support."""
    status, detail = n.get("status"), n.get("reason_detail")
    if status == "SUPPRESSED":
        if detail:
            return f"not sent: {detail}"
        return suppressed_text(n.get("suppressed_reason")).replace("Not sent:", "not sent:")
    if status == "QUEUED":
        due = n.get("next_attempt_at")
        if detail:
            return f"not sent yet: {detail}"
        if due is not None and due > now:
            if n.get("last_error_class"):
                return f"retrying at {due:%H:%M} UTC: {error_text(n['last_error_class'])}"
            return f"scheduled for {due:%Y-%m-%d %H:%M} UTC"
        # Whether a worker holds it, or what else does, is delivery's read model to say (domain/delivery/state.py,
        # which every page and command lays over this answer): from the row alone, only that it is due.
        return "due, not yet sent"
    if status == "SENT":
        return "sent; the provider has not confirmed delivery yet"
    if status == "DELIVERED":
        return "delivered"
    if status == "FAILED":
        return f"failed: {error_text(n.get('last_error_class')) or 'permanent failure'}"
    return str(status or "")


def intent_why(i: Mapping[str, Any]) -> str:
    """A journey nudge's state in plain words: "scheduled for …", "superseded by credit_check_done at …",
    "sent at …", "suppressed: quiet hours"."""
    status = i.get("status")
    if status == "scheduled":
        return f"scheduled for {i['scheduled_for']:%Y-%m-%d %H:%M:%S} UTC" if i.get("scheduled_for") else "scheduled"
    if status == "pending":
        return "being sent now"
    return str(i.get("final_reason") or status or "")

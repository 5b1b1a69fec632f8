"""Plain words for every code a page or the command line prints (domain/ledger/reasons.py, the one mapping).

Invariants: every suppression reason the floor can give, every error class and every journey drop reason has its
words; a campaign's suppressed counts read "4,619 not sent: campaign cancelled", most first; a refund's reason that
names a code says it in words; a code no table knows yet is still readable (no underscores); the message page says
"not sent" for a suppressed row's attempts, and has no receipt line for a message that never went out.
"""

from __future__ import annotations

from typing import Any, get_args

from dashboard.pages.balance import hour_row, hour_text, runs_out_text
from dashboard.pages.message_detail import attempts_text, receipt_text
from domain.ledger import floor, reasons
from domain.support.message import CODE_MASK, body_as_sent


def test_every_code_has_words():
    for code in get_args(floor.SuppressReason):
        assert code in reasons.SUPPRESSED and code in reasons.SUPPRESSED_SHORT, code
    assert reasons.SUPPRESSED.keys() == reasons.SUPPRESSED_SHORT.keys()
    assert set(reasons.DROPPED) == {"late", "not_further"}


def test_campaign_suppressed_counts_read_as_words_most_first():
    assert reasons.suppressed_counts({"opted_out": 12, "campaign_cancelled": 4619}) == \
        "4,619 not sent: campaign cancelled; 12 not sent: opted out"
    assert reasons.suppressed_counts({}) == "" and reasons.suppressed_counts({"daily_cap": 0}) == ""


def test_codes_nobody_mapped_yet_are_still_words():
    assert reasons.suppressed_short("brand_new_reason") == "brand new reason"
    assert reasons.suppressed_text("brand_new_reason") == "Not sent: brand new reason."
    assert reasons.error_text("contract") == "the receiver rejected the request as invalid"
    # A suppressing attempt records its suppression reason as its error class: the attempt table says it in words.
    assert reasons.error_text("no_contact_point") == "no address on this channel"
    assert reasons.dropped_text("not_further").startswith("not further: a repeat")


def test_refund_reasons_name_no_codes():
    assert reasons.entry_reason("refund: contract") == "refund: the receiver rejected the request as invalid"
    assert reasons.entry_reason("refund: no_contact_point") == "refund: no address on this channel"
    assert reasons.entry_reason("refund: campaign cancelled") == "refund: campaign cancelled"
    assert reasons.entry_reason("sms otp_code") == "sms otp_code"  # a charge's reason is the template, as written


def _m(**kw: Any) -> dict[str, Any]:
    return {"status": "SENT", "attempts": 1, "max_attempts": 8, "receipt": None, "sent_at": None,
            "channel": "sms", **kw}


def test_a_suppressed_message_was_not_sent_and_owes_no_receipt():
    assert attempts_text(_m(status="SUPPRESSED", attempts=1)) == "not sent"
    assert attempts_text(_m(status="QUEUED", attempts=0)) == "none yet (at most 8)"
    assert attempts_text(_m(attempts=3)) == "3 of at most 8"
    assert receipt_text(_m(status="SUPPRESSED")) == ""
    assert receipt_text(_m(sent_at="2026-12-01")) == "no receipt yet"


def test_a_sent_body_never_shows_a_code_or_a_contact_point():
    body = body_as_sent("Your code is {code}. It expires in 10 minutes, {name}.", {"name": "Ann"})
    assert body == f"Your code is {CODE_MASK}. It expires in 10 minutes, Ann."
    assert CODE_MASK in body_as_sent("Code {otp:>6} for {email}", {"email": "a@b.example"})  # unfillable format
    assert "a@b.example" not in body_as_sent("Hi {who}", {"who": "a@b.example"})
    assert "+15550001" not in body_as_sent("Hi {who}", {"who": "+15550001234"})


def test_the_balance_by_the_hour_reads_as_sums():
    hour = 493_000
    assert hour_text(hour) == "2026-03-29 16:00–17:00"
    row = hour_row({"hour": hour, "kind": "reserve", "entries": 312, "amount_cents": -312, "reason": "sms offer",
                    "actor_ref": None})
    assert (row["kind"], row["amount"], row["reason"], row["id"]) == ("312 charges", "-3.12 EUR", "", "493000")
    top = hour_row({"hour": hour, "kind": "top_up", "entries": 1, "amount_cents": 25000, "reason": "INV-1",
                    "actor_ref": "operator:alice"})
    assert (top["kind"], top["amount"], top["who"]) == ("top-up", "+250.00 EUR", "operator:alice")
    assert runs_out_text("2027-03-24T10:15:00+00:00", 12) == "2027-03-24 10:15 UTC"
    assert runs_out_text(None, 12) == "not at this rate"
    assert runs_out_text(None, 0) == "nothing spent in the last hour"

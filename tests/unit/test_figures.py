"""The dashboard's figures (pure): money is shown only where the balance was charged, a delivery rate says what it is
over, the ops verdict goes amber before a breach and red at it, and a change names who made it and when."""

from datetime import UTC, datetime, timedelta, timezone

from dashboard.format import ago, change_line, cost_text, ops_banner, rate_text


def row(status: str, **kw: object) -> dict[str, object]:
    return {"status": status, "cost_cents": 5, **kw}


def test_a_message_shows_a_cost_only_where_it_was_charged():
    # With the ledger's money columns: what the balance really holds or gave back.
    assert cost_text(row("DELIVERED", reserved_cents=5, refunded_cents=0)) == "0.05 EUR"
    assert cost_text(row("QUEUED", reserved_cents=5, refunded_cents=0)) == "0.05 EUR reserved"
    assert cost_text(row("QUEUED", reserved_cents=0, refunded_cents=0)) == "—", "not reserved yet: nothing charged"
    assert cost_text(row("FAILED", reserved_cents=0, refunded_cents=5)) == "refunded 0.05 EUR"
    assert cost_text(row("SUPPRESSED", reserved_cents=0, refunded_cents=0)) == "—", "suppressed: never charged"
    assert cost_text(row("SUPPRESSED", reserved_cents=0, refunded_cents=5)) == "refunded 0.05 EUR"
    # Without them (other lists): the price of a sent row, and nothing for an unsent one.
    assert cost_text(row("SENT")) == "0.05 EUR"
    assert cost_text(row("SUPPRESSED")) == "—"
    assert cost_text(row("FAILED")) == "—"


def test_a_delivery_rate_names_what_it_is_over():
    assert rate_text(64, 64) == "100% of 64 attempted"
    assert rate_text(3, 4) == "75% of 4 attempted"
    assert rate_text(0, 0) == "—", "nothing attempted (say, everything suppressed) is no rate at all"
    assert rate_text(1234, 2000) == "62% of 2,000 attempted"
    # Issue 27, item 5: "100 % of 283 attempted" with one failure was a rounding, not a fact.
    assert rate_text(282, 283) == "99.6% of 283 attempted"
    assert rate_text(9999, 10000) == "99.9% of 10,000 attempted"
    assert rate_text(1, 1000) == "0.1% of 1,000 attempted" and rate_text(1, 100_000) == "0.1% of 100,000 attempted"
    assert rate_text(0, 5) == "0% of 5 attempted"


def lane(name: str, oldest: float, paused: bool = False) -> dict[str, object]:
    return {"lane": name, "oldest_owed_seconds": oldest, "paused": paused}


def test_the_ops_verdict_is_red_at_a_breach_amber_before_it_and_green_otherwise():
    assert ops_banner([lane("high", 1.0), lane("bulk", 0.0)], 60, 0)[0] == "green"
    level, text = ops_banner([lane("high", 50.0), lane("bulk", 0.0)], 60, 0)
    assert level == "amber" and "close to the SLO on high" in text, "over 80 % of the SLO warns before a breach"
    level, text = ops_banner([lane("high", 61.0), lane("normal", 55.0)], 60, 3)
    assert level == "red" and "high" in text and "normal" not in text
    level, text = ops_banner([lane("bulk", 0.0, paused=True)], 60, 0)
    assert level == "amber" and "paused: bulk" in text, "a paused lane is never shown as all-clear"
    level, text = ops_banner([lane("bulk", 90.0, paused=True)], 60, 0)
    assert level == "red" and "paused: bulk" in text, "a breach does not hide which lane is paused"
    level, text = ops_banner([lane("high", 0.0)], 60, 2)
    assert level == "amber" and "2 waiting for a human" in text


def test_a_change_names_who_what_and_when_in_utc():
    at = datetime(2026, 11, 30, 8, 46, 29, tzinfo=timezone(timedelta(hours=1)))
    line = change_line({"event_type": "order.approved", "actor_ref": "operator:alice", "occurred_at": at})
    assert line == "approved by alice at 07:46:29"
    api = change_line({"event_type": "order.cancelled", "actor_ref": "apikey:ak_1", "occurred_at": at.astimezone(UTC)})
    assert api == "cancelled by apikey:ak_1 at 07:46:29", "a change made over the API names its key"
    assert change_line(None) == ""


def test_updated_ago_counts_whole_seconds_and_never_goes_negative():
    assert ago(0) == "updated 0 s ago" and ago(4.9) == "updated 4 s ago" and ago(-1) == "updated 0 s ago"

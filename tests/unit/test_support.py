"""Pure pieces of support and sessions.

Invariants: a query is read as every kind it can be and nothing it cannot (a bare number is a message id and an
order number, `#n` and `n-n` only a message id, an email is lower-cased, a phone is its digits); control characters
and over-long queries are refused before anything runs; after login we only ever go to a path on this site; a
malformed cookie is no session; redaction removes contact points and secrets but keeps the payload's shape.
"""

from __future__ import annotations

import uuid

import pytest

from domain.access.sessions import COOKIE, cookie_token, safe_next
from domain.support.message import REDACTED, redact
from domain.support.query import MAX_QUERY_CHARS, QueryRefused, read_query


def test_each_query_kind_is_read_as_what_it_can_be() -> None:
    # `#4940` is how the pages print a message id and how the orders list prints an order number: both readings.
    hashed = read_query("#4940")
    assert (hashed.message_id, hashed.order_id, hashed.kinds) == (4940, 4940, ["message id", "order number"])
    assert read_query("n-4940").message_id == 4940 and read_query("N-4940").kinds == ["message id"]
    assert read_query("n-4940").order_id is None  # a job id names a message only
    bare = read_query("4940")
    assert (bare.message_id, bare.order_id, bare.phone_digits) == (4940, 4940, "")
    ev = uuid.uuid4()
    assert read_query(str(ev)).event_id == ev and read_query(str(ev)).kinds == ["event id"]
    assert read_query(" Asha@Example.TEST ").email == "asha@example.test"
    assert read_query("+91 98000-00001").phone_digits == "919800000001"
    assert read_query("919800000001").phone_digits == "919800000001"  # and not an id: beyond the integer range
    assert read_query("919800000001").message_id is None
    assert read_query("email-88753550ad4f").text == "email-88753550ad4f"
    assert read_query("Asha Rao").name == "Asha Rao" and read_query("Asha Rao").text == ""
    assert read_query("#99999999999").message_id is None  # beyond the column: no hit, never an overflow
    assert read_query("#99999999999").order_id is None


@pytest.mark.parametrize("raw", ["", "   ", "a\x00b", "\x07", "a\nb", "x" * (MAX_QUERY_CHARS + 1), "\ud800"])
def test_hostile_queries_are_refused_before_anything_runs(raw: str) -> None:
    with pytest.raises(QueryRefused):
        read_query(raw)


@pytest.mark.parametrize(("raw", "expected"), [
    ("/messages/5", "/messages/5"), ("/search?q=%234940", "/search?q=%234940"), ("/ledger?status=FAILED&page=2",
                                                                                  "/ledger?status=FAILED&page=2"),
    ("//evil.example", "/orders"), ("https://evil.example/x", "/orders"), ("/\\evil.example", "/orders"),
    ("%2F%2Fevil.example", "/orders"), ("/%2F/evil.example", "/orders"), ("javascript:alert(1)", "/orders"),
    ("/login", "/orders"), ("", "/orders"), (None, "/orders"), ("/x\r\nSet-Cookie: a=b", "/orders")])
def test_after_login_we_go_only_to_a_path_on_this_site(raw: str | None, expected: str) -> None:
    assert safe_next(raw, "/orders") == expected


def test_a_malformed_cookie_is_no_session() -> None:
    good = "A" * 43
    assert cookie_token(f"theme=dark; {COOKIE}={good}") == good
    for bad in ("", f"{COOKIE}=short", f"{COOKIE}={'A' * 42}!", "garbage;;;===", f'{COOKIE}="{"A" * 44}"'):
        assert cookie_token(bad) == ""


def test_redaction_removes_contact_points_and_secrets_but_keeps_the_shape() -> None:
    payload = {"headline": "10% off", "email": "a@b.test", "phone": "+15550001111", "code": "123456",
               "note": "call +91 98000 00001 or mail x@y.test", "items": [{"otp": "9"}], "order_id": 913}
    out = redact(payload)
    assert out["headline"] == "10% off" and out["order_id"] == 913
    assert out["email"] == out["phone"] == out["code"] == out["items"][0]["otp"] == REDACTED
    assert "98000" not in out["note"] and "x@y.test" not in out["note"] and out["note"].startswith("call ")


def test_a_keyset_page_knows_both_of_its_neighbours() -> None:
    """A page read with LIMIT n+1: the first page has only older rows beyond it; a `before` page has newer ones
    too; an `after` page (read oldest first) comes back newest first, with older rows behind it."""
    from domain.support.pages import keyset

    rows = [{"id": i} for i in (9, 8, 7)]
    first = keyset(rows, 2, None, None)
    assert [r["id"] for r in first.rows] == [9, 8] and first.has_older and not first.has_newer
    last = keyset(rows[:2], 2, 10, None)
    assert not last.has_older and last.has_newer
    newer = keyset([{"id": i} for i in (4, 5, 6)], 2, None, 3)
    assert [r["id"] for r in newer.rows] == [5, 4] and newer.has_older and newer.has_newer

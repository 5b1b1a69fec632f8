"""Invariant (pure): a search term reaches LIKE literally (its wildcards and escapes are escaped)."""

from domain.db import like_escape


def test_like_wildcards_are_taken_literally():
    assert like_escape("50%_off") == "50\\%\\_off"
    assert like_escape("a\\b") == "a\\\\b"

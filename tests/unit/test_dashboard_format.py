"""Input at the edges (pure): ids from the browser are ASCII digits within PostgreSQL's integer or nothing; chart
axes step by round numbers."""

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from dashboard.format import MAX_ID, parse_id, round_ticks


def test_ids_that_python_calls_digits_but_are_not_ours_are_refused():
    for raw in ("²", "١٢٣", "12 ", "+5", "-1", "0", "", "1e3", str(MAX_ID + 1), "9" * 40, None):
        assert parse_id(raw) is None, raw
    assert parse_id("913") == 913 and parse_id(str(MAX_ID)) == MAX_ID


@given(st.text(max_size=30))
def test_parse_id_never_crashes_and_only_accepts_what_fits(raw):
    v = parse_id(raw)
    assert v is None or ((1 <= v <= MAX_ID and raw == str(v).lstrip("0")) or raw.lstrip("0") == str(v))


def test_an_amount_read_back_in_words_tells_a_slipped_digit_apart():
    """A top-up is read back in words before money moves: 250.00 and 2,500.00 must read as different sentences,
    and every amount the page accepts can be said."""
    from dashboard.format import amount_in_words

    assert amount_in_words(25000) == "two hundred fifty euros and no cents"
    assert amount_in_words(250000) == "two thousand five hundred euros and no cents"
    assert amount_in_words(1234) == "twelve euros and thirty-four cents"
    assert amount_in_words(101) == "one euro and one cent"
    assert amount_in_words(10**9) == "ten million euros and no cents"


@given(st.integers(min_value=1, max_value=10**9))
def test_every_accepted_amount_has_its_own_words(cents):
    from dashboard.format import amount_in_words

    said = amount_in_words(cents)
    assert said and "_" not in said and (cents == 10**9 or said != amount_in_words(cents + 1))


@given(st.floats(min_value=0, max_value=1e7, allow_nan=False))
def test_chart_ticks_are_round_even_steps_from_zero_past_the_top(top: float) -> None:
    """Invariant: an axis starts at 0, reaches the highest value, and steps evenly by 1, 2 or 5 times a power of
    ten, whole from 1 up, in at most 6 ticks (the issue saw 0/5/10/20)."""
    ticks = round_ticks(top)
    steps = {round(b - a, 6) for a, b in itertools.pairwise(ticks)}
    assert ticks[0] == 0 and ticks[-1] >= top and 2 <= len(ticks) <= 6 and len(steps) == 1, ticks
    (step,) = steps
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert step >= 1 and round(mantissa, 6) in (1, 2, 5), ticks

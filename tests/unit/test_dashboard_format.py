"""Input at the edges (pure): ids from the browser are ASCII digits within PostgreSQL's integer or nothing."""

from hypothesis import given
from hypothesis import strategies as st

from dashboard.format import MAX_ID, parse_id


def test_ids_that_python_calls_digits_but_are_not_ours_are_refused():
    for raw in ("²", "١٢٣", "12 ", "+5", "-1", "0", "", "1e3", str(MAX_ID + 1), "9" * 40, None):
        assert parse_id(raw) is None, raw
    assert parse_id("913") == 913 and parse_id(str(MAX_ID)) == MAX_ID


@given(st.text(max_size=30))
def test_parse_id_never_crashes_and_only_accepts_what_fits(raw):
    v = parse_id(raw)
    assert v is None or ((1 <= v <= MAX_ID and raw == str(v).lstrip("0")) or raw.lstrip("0") == str(v))

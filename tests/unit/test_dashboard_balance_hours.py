"""The balance page's hours from the browser (pure): an hour past the next one is no hour at all — a page that names
`?hour=2147483647` gets the hours view, never a crash in Python's or PostgreSQL's time arithmetic."""

from datetime import UTC, datetime

from dashboard.pages.balance import _an_hour, hour_text


def test_an_hour_beyond_the_next_is_the_hours_view_and_every_accepted_hour_can_be_said():
    now_hour = int(datetime.now(UTC).timestamp()) // 3600
    for raw in ("2147483647", str(now_hour + 2), "0", "-1", "x", "", None, "²"):
        assert _an_hour(raw) == 0, raw
    for h in (1, now_hour, now_hour + 1):
        assert _an_hour(str(h)) == h
        assert hour_text(h)  # says it

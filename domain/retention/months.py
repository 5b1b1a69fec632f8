"""Months as the partitions see them (UTC, the first of the month), and their names. Pure: values in, values out."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

# The tables partitioned by month, each with the column its months are ranges of. The ledger last: a month's
# attempts reference its messages, so they are dropped before them (archive goes in this order).
PARTITIONED: dict[str, str] = {
    "notification_attempts": "notification_created_at",
    "delivery_receipts": "received_at",
    "notifications": "created_at",
}
_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
_NAME = re.compile(r"^(?P<parent>[a-z_]+)_(?P<y>\d{4})_(?P<m>\d{2})$")


def parse_month(text: str) -> date:
    """'2026-08' -> 2026-08-01; anything else is refused with a message that says what is expected."""
    m = _MONTH.match(text.strip())
    if m is None:
        raise ValueError(f"expected a month as YYYY-MM (e.g. 2026-08), got {text!r}")
    return date(int(m.group(1)), int(m.group(2)), 1)


def month_of(at: datetime | date) -> date:
    if isinstance(at, datetime):
        at = at.astimezone(UTC).date() if at.tzinfo is not None else at.date()
    return at.replace(day=1)


def add_months(m: date, n: int) -> date:
    y, mo = divmod(m.month - 1 + n, 12)
    return date(m.year + y, mo + 1, 1)


def partition_name(parent: str, m: date) -> str:
    return f"{parent}_{m:%Y_%m}"


def month_of_partition(parent: str, name: str) -> date | None:
    """The month a partition named by `partition_name` holds; None for the DEFAULT partition or a stranger."""
    got = _NAME.match(name)
    if got is None or got.group("parent") != parent:
        return None
    return date(int(got.group("y")), int(got.group("m")), 1)


def bounds(m: date) -> tuple[str, str]:
    """The partition's range as timestamptz literals: [first of the month, first of the next) in UTC."""
    return f"{m.isoformat()} 00:00:00+00", f"{add_months(m, 1).isoformat()} 00:00:00+00"


def is_partition(table: str) -> bool:
    """A month's or the DEFAULT partition of a partitioned table: created at run time, never in the models (the
    migration drift check and autogenerate leave them out)."""
    return any(table == f"{parent}_default" or month_of_partition(parent, table) is not None
               for parent in PARTITIONED)

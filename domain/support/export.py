"""A filtered ledger view as CSV: the columns the ledger page shows (the recipient by its ref — never a phone or an
email), read in keyset batches so a large export holds no more than one batch in memory at a time."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import replace
from typing import Final

from sqlalchemy.engine import Engine

from domain.ledger import views as ledger_views
from domain.ledger.reasons import ledger_reason

COLUMNS: Final = ("id", "created_at", "channel", "lane", "recipient", "template", "status", "reason", "attempts",
                  "cost_cents", "provider_reference", "event_id", "order_id", "job_id", "sent_at", "settled_at")
MAX_ROWS: Final[int] = 100_000
BATCH: Final[int] = 2_000


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    # A spreadsheet runs a cell that starts with one of these as a formula: quote it (OWASP's CSV injection advice).
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def ledger_csv_lines(tenant_id: int, f: ledger_views.LedgerFilter, max_rows: int = MAX_ROWS,
                     engine: Engine | None = None) -> Iterator[str]:
    """The header, then one line per row of the filtered ledger, newest first, at most `max_rows`."""
    buf = io.StringIO()
    writer = csv.writer(buf)

    def line(values: tuple[object, ...]) -> str:
        buf.seek(0)
        buf.truncate()
        writer.writerow(values)
        return buf.getvalue()

    yield line(COLUMNS)
    page = replace(f, limit=min(BATCH, max_rows), after_id=None)
    left = max_rows
    while left > 0:
        rows, more = ledger_views.ledger_rows(tenant_id, replace(page, limit=min(BATCH, left)), engine)
        for n in rows:
            yield line(tuple(_cell(n.get(c)) if c != "reason" else _cell(ledger_reason(n)) for c in COLUMNS))
        left -= len(rows)
        if not more or not rows:
            return
        page = replace(page, before_id=rows[-1]["id"])


def ledger_csv(tenant_id: int, f: ledger_views.LedgerFilter, max_rows: int = MAX_ROWS,
               engine: Engine | None = None) -> str:
    return "".join(ledger_csv_lines(tenant_id, f, max_rows, engine))

"""The on-call command line under hostile input, on real PostgreSQL.

Invariants: bad input is a clear error (exit 2, a line on stderr, no traceback, no SQL) and changes nothing — a
`--since` reaching before year 1, a tenant beyond PostgreSQL's integer; a message id beyond every id is exactly a
missing one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cli import run
from tests.support.retention import table_digest


@pytest.mark.parametrize("args", [
    ("messages", "--since", "999999d"),
    ("messages", "--tenant", "99999999999"),
    ("replay", "1", "--tenant", "99999999999"),
    ("resolve", "1", "--tenant", "99999999999", "--note", "x"),
])
def test_hostile_cli_input_is_a_clear_error_and_changes_nothing(db: str, args: tuple[str, ...]) -> None:
    """Invariant: exit 2 with an error line, never a traceback, and not a row changed."""
    before = table_digest()
    r = run(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "error" in r.stderr.lower(), (args, r.stderr[-600:])
    assert "UPDATE" not in r.stderr and "psycopg" not in r.stderr
    assert table_digest() == before


def test_a_message_id_beyond_every_id_is_exactly_a_missing_one(db: str) -> None:
    """Invariant: an id past bigint is answered like any missing id (unchanged, no error), changing nothing."""
    before = table_digest()
    huge = run("replay", "99999999999999999999", "--note", "x")
    missing = run("replay", "987654321", "--note", "x")
    assert huge.returncode == missing.returncode == 0
    def said(r: Any, i: str) -> str:
        return " ".join(r.stderr.replace(i, "N").split())  # rich wraps a long line where it fits

    assert said(huge, "99999999999999999999") == said(missing, "987654321")
    assert table_digest() == before

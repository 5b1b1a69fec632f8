"""The rooms of `domain/` hold their shape: each capability's SQL is named in its `sql.py`, and only the ledger
writes messages. Read from the source, so a new inline statement fails here before anyone reviews it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every package of domain/ that runs SQL (test_every_package_that_runs_sql_is_checked keeps this list whole).
NAMED_SQL_PACKAGES = ("access", "orders", "ledger", "journeys", "campaigns", "support", "delivery", "endpoints",
                      "retention", "cdc", "invariants")
# The modules a package names its statements in: its `sql.py`, and for the ledger and delivery their statements by
# concern besides (the ledger's metering and read models; delivery's record, operators' review and read models).
# Every name here must exist (test_the_named_sql_modules_exist).
SQL_MODULES = {"ledger": ("sql.py", "sql_metering.py", "sql_reads.py"),
               "delivery": ("sql.py", "sql_record.py", "sql_review.py", "sql_reads.py")}
# A statement: raw text, or a Core statement built on the spot.
INLINE_SQL = re.compile(r"\bsa\.(text|insert|update|delete|select)\(|\btext\(\s*[\"f]")
# SQL built from plain strings (a condition or a statement in a string literal, to be joined into one later).
STRING_SQL = re.compile(r"""["'][^"'\n]*\b(SELECT\s+(1|count|\*|\w+\.\w+|DISTINCT)|INSERT\s+INTO|DELETE\s+FROM"""
                        r"""|UPDATE\s+\w+\s+SET|IS\s+(NOT\s+)?NULL\s+AND|=\s*ANY\(|\bAND\s+EXISTS\s*\()""")
INSERTS_MESSAGES = re.compile(r"INSERT\s+INTO\s+notifications\b|insert\(\s*(table_of\(Notification\)|NOTIFICATIONS)")


@pytest.mark.parametrize("package", NAMED_SQL_PACKAGES)
def test_a_capability_names_every_statement_in_its_sql_module(package: str) -> None:
    """Invariant: in every package of domain/ that runs SQL (access, orders, ledger, journeys, campaigns, support,
    delivery, endpoints, retention, cdc, invariants), every statement lives in the package's `sql.py` (the
    ledger's and delivery's in their SQL_MODULES); no other module of the package builds SQL inline (there is one
    place to read what it asks)."""
    folder = ROOT / "domain" / package
    assert (folder / "sql.py").is_file(), f"domain/{package}/ has no sql.py"
    named = SQL_MODULES.get(package, ("sql.py",))
    inline = [f"domain/{package}/{f.name}:{n}" for f in sorted(folder.glob("*.py")) if f.name not in named
              for n, line in enumerate(f.read_text().splitlines(), 1)
              if INLINE_SQL.search(line) or STRING_SQL.search(line)]
    assert inline == [], f"SQL written outside sql.py: {inline}"


def test_the_named_sql_modules_exist() -> None:
    """A module named in SQL_MODULES that is gone (renamed, merged back) fails here: the list stays exactly what
    the rule exempts."""
    missing = [f"domain/{p}/{m}" for p, ms in SQL_MODULES.items() for m in ms
               if not (ROOT / "domain" / p / m).is_file()]
    assert missing == [], f"SQL_MODULES names modules that do not exist: {missing}"


def test_every_package_that_runs_sql_is_checked() -> None:
    """Invariant: the rule covers all of domain/: a package with a `sql.py`, or with an inline statement, is in
    NAMED_SQL_PACKAGES (a new package cannot slip past the check above by not being listed)."""
    runs_sql = sorted(d.name for d in (ROOT / "domain").iterdir() if d.is_dir() and (
        (d / "sql.py").is_file() or any(INLINE_SQL.search(f.read_text()) for f in d.glob("*.py"))))
    missing = [name for name in runs_sql if name not in NAMED_SQL_PACKAGES]
    assert missing == [], f"packages of domain/ that run SQL but are not checked: {missing}"


def test_only_the_ledger_inserts_messages() -> None:
    """Invariant: the ledger is the one way in. No module of the domain, the dashboard or the runtime but
    `domain/ledger/sql.py` inserts into `notifications` (the drills seed their own databases and are exempt)."""
    writers = []
    for base in ("domain", "dashboard", "jobs"):
        for f in sorted((ROOT / base).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel.startswith("jobs/drills/") or rel == "domain/ledger/sql.py":
                continue
            if INSERTS_MESSAGES.search(f.read_text()):
                writers.append(rel)
    assert writers == [], f"modules that write messages around the ledger: {writers}"


def test_the_checks_see_what_they_are_meant_to_see() -> None:
    """The two patterns above match what they forbid (a check that matches nothing would pass forever)."""
    assert INLINE_SQL.search('row = uow.execute(sa.text("SELECT 1"))')
    assert INLINE_SQL.search("q = sa.update(t).where(t.c.id == 1)")
    assert not INLINE_SQL.search("uow.execute(sql.READ_ORDER, {})")
    assert STRING_SQL.search('return f"{col} IS NOT NULL AND NOT (:channel = ANY(r.opted_out_channels))"')
    assert STRING_SQL.search('cond + " AND EXISTS (SELECT 1 FROM leads l WHERE l.tenant_id = r.tenant_id "')
    assert not STRING_SQL.search('"""Who a segment selects right now (for tests and previews)."""')
    assert INSERTS_MESSAGES.search('"INSERT INTO notifications (tenant_id) VALUES (1)"')
    assert not INSERTS_MESSAGES.search('"INSERT INTO notification_attempts (id) VALUES (1)"')

"""Each package's `__init__` is its index: one line per module (or sub-package), in the form "- `name` — what it
holds", and none left out or named that is not there.

Invariant protected: a newcomer reads a room's index first (docs/architecture.md); a module added, renamed or
removed without its line fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The packages with an index: every room of domain/, and jobs/'s ops, drills and command line.
INDEXED = [*sorted(p.parent for p in (ROOT / "domain").glob("*/__init__.py")),
           ROOT / "jobs" / "ops", ROOT / "jobs" / "drills", ROOT / "jobs" / "cli"]
LINE = re.compile(r"^- `([a-z_]+/?)` — \S", re.M)


def _members(package: Path) -> set[str]:
    modules = {f.stem for f in package.glob("*.py") if f.stem != "__init__"}
    return modules | {f"{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()}


@pytest.mark.parametrize("package", INDEXED, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_package_index_names_each_module_once(package: Path) -> None:
    named = LINE.findall((package / "__init__.py").read_text())
    assert len(named) == len(set(named)), f"named twice: {sorted(n for n in named if named.count(n) > 1)}"
    assert set(named) == _members(package), (
        f"missing: {sorted(_members(package) - set(named))}, not there: {sorted(set(named) - _members(package))}")


def test_the_check_reads_an_index_line() -> None:
    assert LINE.findall("- `sql` — its statements.\n- `bench/` — the benchmarks.") == ["sql", "bench/"]
    assert LINE.findall("- `sql`: its statements") == []

"""Every reference a comment or docstring makes to a name in our code resolves: `module.NAME` (a module of domain/,
jobs/ or dashboard/ by its last name, e.g. `metering.reserve`, `wakeups.scan_owed`) or a dotted path
(`domain.delivery.wakeups.after_commit`) names something that exists.

Invariant protected: comments explain the code they sit in; a name renamed or moved leaves no comment pointing at
nothing (the readability issue found `metering._RESERVE` and `domain.wakeups.after_commit` cited, neither there).
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("domain", "jobs", "dashboard")
# `name.attr` between backticks, optionally a dotted path before it.
REFERENCE = re.compile(r"`((?:[a-z_][a-z0-9_]*\.)+)([A-Za-z_][A-Za-z0-9_]*)`")


def _modules() -> dict[str, list[str]]:
    """Our modules by their last name (`wakeups` -> [domain.delivery.wakeups])."""
    out: dict[str, list[str]] = {}
    for room in ROOMS:
        for f in (ROOT / room).rglob("*.py"):
            dotted = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            if dotted.endswith(".__init__"):
                dotted = dotted[: -len(".__init__")]
            out.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    return out


@cache
def _load(dotted: str) -> ModuleType | None:
    try:
        return importlib.import_module(dotted)
    except Exception:
        return None


# `slot.py`, `link.js`: a file, not a name.
FILE_SUFFIXES = frozenset({"py", "js", "md", "sql", "toml", "json", "yml", "yaml", "csv", "html", "txt", "ini"})


def _resolves(path: str, name: str, modules: dict[str, list[str]]) -> bool | None:
    """True/False: the reference resolves or not; None: not a reference to our code (a library's, a column's)."""
    if name in FILE_SUFFIXES:
        return None
    parts = path.rstrip(".").split(".")
    if parts[0] in ROOMS:  # a dotted path from the top
        for cut in range(len(parts), 0, -1):
            mod = _load(".".join(parts[:cut]))
            if mod is not None:
                obj: object = mod
                for attr in [*parts[cut:], name]:
                    if not hasattr(obj, attr):
                        return _load(".".join([*parts, name])) is not None
                    obj = getattr(obj, attr)
                return True
        return False
    candidates = modules.get(parts[-1])
    if not candidates or len(parts) > 1:
        return None
    loaded = [m for m in (_load(c) for c in candidates) if m is not None]
    return any(hasattr(m, name) or _load(f"{m.__name__}.{name}") is not None for m in loaded)


def _references() -> list[tuple[str, str, str]]:
    out = []
    for room in ROOMS:
        for f in sorted((ROOT / room).rglob("*.py")):
            for n, line in enumerate(f.read_text().splitlines(), 1):
                out += [(f"{f.relative_to(ROOT)}:{n}", path, name) for path, name in REFERENCE.findall(line)]
    return out


def test_every_name_a_comment_cites_exists() -> None:
    modules = _modules()
    broken = [f"{where}: `{path}{name}`" for where, path, name in _references()
              if _resolves(path, name, modules) is False]
    assert broken == [], "comments cite names that are not there:\n" + "\n".join(broken)


@pytest.mark.parametrize(("path", "name", "expected"), [
    ("wakeups.", "scan_owed", True), ("metering.", "_RESERVE", False),
    ("domain.delivery.wakeups.", "after_commit", True), ("domain.wakeups.", "after_commit", False),
    ("psycopg.", "AsyncConnection", None)])
def test_the_check_sees_what_it_is_meant_to_see(path: str, name: str, expected: bool | None) -> None:
    assert _resolves(path, name, _modules()) is expected

"""Every code reference a comment or docstring makes resolves (issue 30): a backticked dotted name that starts at one
of our packages (`domain.delivery.wakeups.after_commit`) or at one of our modules' names (`policy.guard_for`) names
something that exists. A rename that leaves comments pointing at nothing fails here, naming the line.

Invariant protected: the comments a newcomer follows lead somewhere."""

from __future__ import annotations

import importlib
import io
import re
import tokenize
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "jobs", "dashboard", "receiver", "fulfilment")
REFERENCE = re.compile(r"`((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*)`")
FILE_SUFFIXES = ("py", "js", "md", "sql", "yml", "yaml", "json", "toml", "ini", "txt", "log", "csv", "html")


def _modules() -> dict[str, list[str]]:
    """A module's last name -> its dotted names (several packages have a `sql`, a `store`)."""
    out: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.setdefault(dotted.rsplit(".", 1)[-1], []).append(dotted)
    return out


def _walk(obj: object, attrs: list[str]) -> bool:
    for a in attrs:
        if hasattr(obj, a):
            obj = getattr(obj, a)
        elif isinstance(obj, ModuleType):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{a}")
            except ImportError:
                return False
        else:
            return False
    return True


def _resolves(ref: str, modules: dict[str, list[str]]) -> bool | None:
    """True/False for a reference to our code; None for anything else (another library, a file name)."""
    parts = ref.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return None
    if parts[0] in PACKAGES:
        starts = [(".".join(parts[:i]), parts[i:]) for i in range(len(parts), 0, -1)]
    elif parts[0] in modules:
        starts = [(m, parts[1:]) for m in modules[parts[0]]]
    else:
        return None
    for module, attrs in starts:
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        if _walk(found, attrs):
            return True
    return False


def test_every_backticked_reference_in_a_comment_names_something_that_exists() -> None:
    modules = _modules()
    broken, checked = [], 0
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
                if tok.type not in (tokenize.COMMENT, tokenize.STRING):
                    continue
                for m in REFERENCE.finditer(tok.string):
                    ok = _resolves(m.group(1), modules)
                    if ok is None:
                        continue
                    checked += 1
                    if not ok:
                        broken.append(f"{path.relative_to(ROOT)}:{tok.start[0]} `{m.group(1)}`")
    assert checked > 20, "the scan found almost no references: is the pattern still right?"
    assert not broken, "comments that point at nothing:\n" + "\n".join(broken)

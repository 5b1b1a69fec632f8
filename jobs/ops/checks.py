"""Every invariant of ARCHITECTURE.md: ours from PostgreSQL, the receiver's through its HTTP API."""

from __future__ import annotations

import httpx

from domain.invariants import invariant_counts

RECEIVER_INVARIANT = "4 two effects for one (event_id, effect_type)"


def receiver_invariants(receiver_url: str) -> dict[str, int | None]:
    """The receiver's own counts; None when it cannot be asked (then the invariant is unchecked, not broken)."""
    try:
        r = httpx.get(f"{receiver_url}/invariants", timeout=5)
        r.raise_for_status()
        return {str(k): int(v) for k, v in r.json().items()}
    except (httpx.HTTPError, ValueError):
        return {RECEIVER_INVARIANT: None}


def all_invariants(receiver_url: str) -> dict[str, int | None]:
    counts: dict[str, int | None] = dict(invariant_counts())
    counts.update(receiver_invariants(receiver_url))
    return dict(sorted(counts.items(), key=lambda kv: _number(kv[0])))


def _number(name: str) -> tuple[int, str]:
    """Invariants in their numeric order (1, 2, … 10), not as text (1, 10, 2, …); each name starts with it."""
    head = name.split(" ", 1)[0]
    return (int(head), name) if head.isdigit() else (10**9, name)

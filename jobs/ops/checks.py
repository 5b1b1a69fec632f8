"""Every invariant of ARCHITECTURE.md: ours from PostgreSQL, the receiver's through its HTTP API; with CDC on, the
fulfilment projection's two counts (its database by URL, the stream through Redis; none of its code)."""

from __future__ import annotations

import httpx

from domain.invariants import invariant_counts
from domain.settings import get_settings

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


def cdc_checks(settle_s: float = 10.0) -> dict[str, int | str]:
    """The CDC path's counts (each must be 0), or why one was not counted: "not enabled" without OUTBOX_CDC,
    "stream not drained" while the group still owes events, what could not be reached."""
    import psycopg
    import redis as redis_lib

    from domain.cdc import views
    from domain.db import libpq_url

    s = get_settings()
    if not s.cdc:
        return {views.PROJECTED_TWICE: "not enabled", views.NEVER_SEEN: "not enabled"}
    url = s.cdc_fulfilment_database_url or views.fulfilment_database_url(s.database_url)
    r = redis_lib.Redis.from_url(s.redis_url, socket_timeout=5)
    try:
        with psycopg.connect(libpq_url(s.database_url), autocommit=True) as ours, \
                views.connect_fulfilment(url) as theirs:
            return views.projection_checks(ours, theirs, r, s.cdc_stream, settle_s=settle_s)
    except psycopg.OperationalError as e:
        why = f"not checked: a database does not answer ({type(e).__name__})"
        return {views.PROJECTED_TWICE: why, views.NEVER_SEEN: why}
    except redis_lib.RedisError as e:
        why = f"not checked: Redis does not answer ({type(e).__name__})"
        return {views.PROJECTED_TWICE: why, views.NEVER_SEEN: why}
    finally:
        r.close()

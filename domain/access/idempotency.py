"""`Idempotency-Key` on creating POSTs (Stripe's model), kept per tenant in PostgreSQL until it expires.

The first request with a key claims it (a row with no answer yet), runs, and stores its answer; the same key with
the same request replays that answer; the same key with another request is refused (`idempotency_key_reused`); a
key whose first request is still running answers `idempotency_key_in_use` (the client retries later). A claim
that was never finished (its process died) is taken over after `HOLD`; an answer is kept for `TTL`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from sqlalchemy.engine import Engine

from domain.access import sql
from domain.db import UnitOfWork

TTL: Final = timedelta(hours=24)
HOLD: Final = timedelta(seconds=60)
HEADER: Final = "Idempotency-Key"
# Printable ASCII without spaces, as Stripe's and the IETF draft's keys (a UUID fits); at most 255 characters.
KEY_PATTERN: Final = r"^[!-~]{1,255}$"
_KEY = re.compile(KEY_PATTERN)


def valid_key(key: str) -> bool:
    return bool(_KEY.match(key))


def request_digest(method: str, path: str, query: str, body: bytes) -> str:
    """What makes two requests "the same": method, path, query and the JSON body's value (so key order and
    whitespace do not matter; a body that is not JSON counts byte for byte)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode() if body else b""
    except ValueError:
        canonical = body
    h = hashlib.sha256()
    for part in (method.upper().encode(), path.encode(), query.encode(), canonical):
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


@dataclass(frozen=True)
class Claimed:
    """This request holds the key: run it, then `finish` (or `release` if it failed on our side)."""


@dataclass(frozen=True)
class Replay:
    status: int
    content_type: str
    body: bytes


@dataclass(frozen=True)
class Reused:
    """The key was first used for another request."""


@dataclass(frozen=True)
class InFlight:
    """The first request with this key has not answered yet."""


Outcome = Claimed | Replay | Reused | InFlight

def claim(tenant_id: int, key: str, digest: str, method: str, path: str, now: datetime | None = None,
          engine: Engine | None = None) -> Outcome:
    now = now or datetime.now(UTC)
    with UnitOfWork(engine) as uow:
        got = uow.execute(sql.CLAIM_KEY, {"t": tenant_id, "k": key, "d": digest, "m": method, "p": path, "now": now,
                                   "hold": now + HOLD, "exp": now + TTL}).first()
        if got is not None:
            uow.execute(sql.PURGE_KEYS, {"now": now})
            uow.commit()
            return Claimed()
        row = uow.execute(sql.READ_KEY, {"t": tenant_id, "k": key}).first()
    if row is None:  # removed between the two statements (its first request failed): the client may retry
        return InFlight()
    if row.request_digest != digest:
        return Reused()
    if row.status is None:
        return InFlight()
    return Replay(row.status, row.content_type or "application/json", bytes(row.response_body or b""))


def finish(tenant_id: int, key: str, digest: str, status: int, content_type: str, body: bytes,
           engine: Engine | None = None) -> None:
    with UnitOfWork(engine) as uow:
        uow.execute(sql.FINISH_KEY, {"t": tenant_id, "k": key, "d": digest, "s": status, "c": content_type, "b": body})
        uow.commit()


def release(tenant_id: int, key: str, digest: str, engine: Engine | None = None) -> None:
    """The request failed before it had an answer worth keeping: the key is free for a retry."""
    with UnitOfWork(engine) as uow:
        uow.execute(sql.RELEASE_KEY, {"t": tenant_id, "k": key, "d": digest})
        uow.commit()

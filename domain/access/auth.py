"""Operator passwords (argon2id) and tenant-scoped API keys (random, stored as SHA-256).

API keys carry 256 bits of randomness, so a fast hash is enough and lets us look a key up by its hash.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.engine import Engine

from domain.access import actions, roles, sql
from domain.db import UnitOfWork

_hasher = PasswordHasher()
KEY_PREFIX = "obx_"


@dataclass(frozen=True)
class Principal:
    """An API key (role "api") or an operator. A platform operator has no tenant: tenant_id is roles.NO_TENANT."""

    tenant_id: int
    actor_ref: str
    display_name: str = ""
    role: str = "api"
    operator_id: int | None = None
    tenant_name: str = ""  # the tenant's own name, as the pages show it ("" for platform, or an API key)

    @property
    def oncall(self) -> bool:
        return self.role == roles.ONCALL

    def may(self, act: roles.Act) -> bool:
        return roles.may(self.role, act)


def principal_of_operator(row: sa.Row[Any]) -> Principal:
    tenant = row.tenant_id if row.tenant_id is not None else roles.NO_TENANT
    return Principal(tenant, f"operator:{row.login}", row.display_name, row.role, row.id,
                     str(getattr(row, "tenant_name", None) or ""))


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(stored_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(tenant_id: int, actor_ref: str | None = None, engine: Engine | None = None,
                   created_by: str = "cli") -> str:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with UnitOfWork(engine) as uow:
        exists = uow.execute(sql.TENANT_EXISTS, {"t": tenant_id}).first()
        if exists is None:
            raise LookupError(f"tenant {tenant_id} does not exist")
        uow.execute(sql.INSERT_API_KEY.values(
            tenant_id=tenant_id, key_hash=_key_hash(key), prefix=key[:8],
            actor_ref=actor_ref or f"apikey:{key[:8]}",
        ))
        actions.record(uow, tenant_id=tenant_id, actor_ref=created_by, action="create API key",
                       target=f"key {key[:8]}… acting as {actor_ref or 'apikey:' + key[:8]}")
        uow.commit()
    return key


def principal_for_key(key: str, engine: Engine | None = None) -> Principal | None:
    if not key.startswith(KEY_PREFIX):
        return None
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.PRINCIPAL_FOR_KEY, {"h": _key_hash(key)}).first()
    return Principal(row.tenant_id, row.actor_ref) if row else None


MAX_PASSWORD_CHARS: Final[int] = 256
MAX_LOGIN_CHARS: Final[int] = 100
# Failures before a lockout, per login and per client address; the lockout doubles with each further failure.
LOGIN_LIMIT: Final[int] = 5
CLIENT_LIMIT: Final[int] = 20
# Both counters are a sliding window of FAILURE_WINDOW: each failure is forgiven after WINDOW / LIMIT (a leaky
# bucket: 20 failures from one address are forgotten 15 minutes later). A success resets only its own login's
# counter, never the address's (one good password must not buy an address another 20 guesses), so without this
# decay one busy address — everyone behind a reverse proxy — would be locked out for good.
FAILURE_WINDOW: Final[timedelta] = timedelta(minutes=15)
FIRST_LOCKOUT: Final[timedelta] = timedelta(seconds=30)
LONGEST_LOCKOUT: Final[timedelta] = timedelta(minutes=15)
# Argon2 is deliberately expensive: at most this many hashes at once per process, whatever arrives.
_HASHING = threading.BoundedSemaphore(2)


@dataclass(frozen=True)
class LockedOut:
    until: datetime


def lockout_for(failures: int, limit: int) -> timedelta | None:
    """Pure: no lockout below the limit; then 30 s, doubling with each further failure, at most 15 minutes."""
    if failures < limit:
        return None
    doubled = timedelta(seconds=FIRST_LOCKOUT.total_seconds() * float(2 ** min(failures - limit, 16)))
    return min(LONGEST_LOCKOUT, doubled)


def leak_seconds(limit: int) -> float:
    """Seconds after which one failure is forgiven, for a counter with this limit."""
    return FAILURE_WINDOW.total_seconds() / limit


def login_operator(login: str, password: str, client: str = "unknown", now: datetime | None = None,
                   engine: Engine | None = None) -> Principal | LockedOut | None:
    """A principal, a lockout (with when it ends), or None for a wrong login or password."""
    now = now or datetime.now(UTC)
    if not login or len(login) > MAX_LOGIN_CHARS or len(password) > MAX_PASSWORD_CHARS:
        return None  # refused before any hashing: a megabyte password costs us nothing
    keys = {f"login:{login.lower()}": LOGIN_LIMIT, f"client:{client}": CLIENT_LIMIT}
    with UnitOfWork(engine) as uow:
        until = uow.execute(sql.LOCKED_UNTIL, {"k": list(keys), "now": now}).scalar()
        row = None if until else uow.execute(sql.OPERATOR_BY_LOGIN, {"l": login}).first()
    if until is not None:
        return LockedOut(until)
    with _HASHING:
        if row is None:
            _hasher.hash(password)  # same work either way: the timing says nothing about which logins exist
            ok = False
        else:
            ok = verify_password(row.password_hash, password)
    with UnitOfWork(engine) as uow:
        if ok:
            uow.execute(sql.FORGET_FAILURES, {"k": f"login:{login.lower()}"})
        else:
            for key, limit in keys.items():
                failures = uow.execute(sql.RECORD_FAILURE, {"k": key, "now": now,
                                                        "leak": leak_seconds(limit)}).scalar_one()
                lock = lockout_for(int(failures), limit)
                if lock is not None:
                    uow.execute(sql.LOCK_OUT, {"u": now + lock, "k": key})
        uow.commit()
    if not ok or row is None:
        return None
    return principal_of_operator(row)


def operator_now(operator_id: int, engine: Engine | None = None) -> Principal | None:
    """Tenant and role as they are NOW (a demoted or removed operator loses rights at their next action)."""
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.OPERATOR_NOW, {"i": operator_id}).first()
    if row is None:
        return None
    return principal_of_operator(row)

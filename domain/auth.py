"""Operator passwords (argon2id) and tenant-scoped API keys (random, stored as SHA-256).

API keys carry 256 bits of randomness, so a fast hash is enough and lets us look a key up by its hash.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.models import ApiKey, table_of

_hasher = PasswordHasher()
KEY_PREFIX = "obx_"


@dataclass(frozen=True)
class Principal:
    tenant_id: int
    actor_ref: str
    display_name: str = ""
    oncall: bool = False


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(stored_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_api_key(tenant_id: int, actor_ref: str | None = None, engine: Engine | None = None) -> str:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with UnitOfWork(engine) as uow:
        exists = uow.execute(sa.text("SELECT 1 FROM tenants WHERE id = :t"), {"t": tenant_id}).first()
        if exists is None:
            raise LookupError(f"tenant {tenant_id} does not exist")
        uow.execute(sa.insert(table_of(ApiKey)).values(
            tenant_id=tenant_id, key_hash=_key_hash(key), prefix=key[:8],
            actor_ref=actor_ref or f"apikey:{key[:8]}",
        ))
        uow.commit()
    return key


def principal_for_key(key: str, engine: Engine | None = None) -> Principal | None:
    if not key.startswith(KEY_PREFIX):
        return None
    with UnitOfWork(engine) as uow:
        row = uow.execute(sa.text(
            "SELECT tenant_id, actor_ref FROM api_keys WHERE key_hash = :h AND revoked_at IS NULL"
        ), {"h": _key_hash(key)}).first()
    return Principal(row.tenant_id, row.actor_ref) if row else None


def login_operator(login: str, password: str, engine: Engine | None = None) -> Principal | None:
    with UnitOfWork(engine) as uow:
        row = uow.execute(sa.text(
            "SELECT id, tenant_id, login, display_name, password_hash, role FROM operators WHERE login = :l"
        ), {"l": login}).first()
    if row is None:
        _hasher.hash(password)  # same work either way: the timing says nothing about which logins exist
        return None
    if not verify_password(row.password_hash, password):
        return None
    return Principal(row.tenant_id, f"operator:{row.login}", row.display_name, row.role == "oncall")

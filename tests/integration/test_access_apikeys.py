"""`outbox apikey list|revoke` as operators run it (real processes), and the API refusing a revoked key.

Invariants: a whole key is printed once, by `create`, and never by `list` (prefix only); revoking needs no SQL, is
kept in the audit log with who and why, happens once (a second revoke changes nothing), and a key of another tenant
looks exactly like a missing one; a revoked key is refused by the API within KNOWN_KEY_SECONDS.
"""

from __future__ import annotations

import asyncio
import json
import time

import sqlalchemy as sa

from dashboard.api.deps import KNOWN_KEY_SECONDS
from domain.db import get_engine
from jobs.cli.console import cli_actor
from tests.support.cli import run


def _key_id(prefix: str) -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT id FROM api_keys WHERE prefix = :p"), {"p": prefix}).scalar_one())


def test_list_shows_prefixes_never_the_key_and_filters_by_tenant(db):
    """Invariant: `list` names each key by its first 8 characters and its actor; the key itself never appears."""
    k42 = run("apikey", "create", "--tenant", "42", "--actor", "svc:shop").stdout.strip()
    k7 = run("apikey", "create", "--tenant", "7").stdout.strip()
    every = run("apikey", "list")
    assert every.returncode == 0, every.stderr
    assert k42[:8] in every.stdout and k7[:8] in every.stdout and "svc:shop" in every.stdout
    assert k42 not in every.stdout and k7 not in every.stdout and k42[8:16] not in every.stdout
    only42 = json.loads(run("apikey", "list", "--tenant", "42", "--json").stdout)
    assert [r["prefix"] for r in only42] == [k42[:8]] and only42[0]["revoked_at"] is None
    assert "key_hash" not in only42[0]


async def test_revoke_is_audited_once_and_the_api_refuses_the_key(db, client):
    """Invariant: after `revoke` the key gets 401 (within KNOWN_KEY_SECONDS even where it was just used); the
    revocation is one audit row with the note; revoking again changes nothing."""
    key = run("apikey", "create", "--tenant", "42").stdout.strip()
    h = {"Authorization": f"Bearer {key}"}
    assert (await client.get("/api/v1/orders/913", headers=h)).status_code == 200
    kid = _key_id(key[:8])
    r = run("apikey", "revoke", str(kid), "--note", "leaked in a ticket")
    assert r.returncode == 0 and "revoked at" in r.stdout and key not in r.stdout, r.stdout + r.stderr
    deadline = time.monotonic() + KNOWN_KEY_SECONDS + 5
    while (status := (await client.get("/api/v1/orders/913", headers=h)).status_code) != 401:
        assert status == 200 and time.monotonic() < deadline, f"revoked key still answered {status}"
        await asyncio.sleep(0.5)
    again = run("apikey", "revoke", str(kid), "--note", "twice")
    assert again.returncode == 0 and "already revoked" in again.stdout
    with get_engine().connect() as c:
        logged = c.execute(sa.text("SELECT actor_ref, target, note FROM operator_actions "
                                   "WHERE action = 'revoke API key'")).all()
    assert [(a, n) for a, _, n in logged] == [(cli_actor(), "leaked in a ticket")] and key[:8] in logged[0][1]
    listed = json.loads(run("apikey", "list", "--json").stdout)
    assert next(r for r in listed if r["id"] == kid)["revoked_at"] is not None


def test_another_tenants_key_looks_missing_and_stays_live(db):
    """Invariant: `revoke --tenant 7` of tenant 42's key answers exactly as for a key that does not exist."""
    key = run("apikey", "create", "--tenant", "42").stdout.strip()
    kid = _key_id(key[:8])
    foreign = run("apikey", "revoke", str(kid), "--tenant", "7", "--note", "x")
    missing = run("apikey", "revoke", "999999", "--tenant", "7", "--note", "x")
    assert foreign.returncode == missing.returncode == 2
    assert foreign.stderr.replace(str(kid), "N") == missing.stderr.replace("999999", "N")
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT revoked_at FROM api_keys WHERE id = :i"), {"i": kid}).scalar() is None

"""`outbox apikey create|list|revoke`: a new key is printed whole once, by `create`; after that keys are shown by
prefix only — we keep only its SHA-256."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from jobs.cli.console import cli_actor, err, out, require_note


def apikey_create(tenant: int = typer.Option(..., help="tenant id the key acts for"),
                  actor: str = typer.Option("", help="audited actor reference")) -> None:
    """Print a new API key (only the key, on stdout)."""
    from domain.access.auth import create_api_key

    try:
        key = create_api_key(tenant, actor or None)
    except LookupError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    print(key)


def apikey_list(tenant: int = typer.Option(0, help="only this tenant's keys (0: every tenant's)"),
                as_json: bool = typer.Option(False, "--json", help="one JSON array on stdout")) -> None:
    """Every API key: id, tenant, prefix, the actor it acts as, created and revoked (live keys first)."""
    from domain.access.apikeys import list_keys

    rows = list_keys(tenant or None)
    if as_json:
        print(json.dumps([{**r, "created_at": r["created_at"].isoformat(),
                           "revoked_at": r["revoked_at"].isoformat() if r["revoked_at"] else None} for r in rows]))
        return
    t = Table(title="API keys (prefix only: a whole key is shown once, when it is created)")
    for col in ("id", "tenant", "prefix", "acts as", "created (UTC)", "by", "revoked (UTC)", "by"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["id"]), f"{r['tenant_id']} {r['tenant_name']}", f"{r['prefix']}…", r["actor_ref"],
                  f"{r['created_at']:%Y-%m-%d %H:%M:%S}", r["created_by"] or "",
                  f"{r['revoked_at']:%Y-%m-%d %H:%M:%S}" if r["revoked_at"] else "live", r["revoked_by"] or "")
    out.print(t)


def apikey_revoke(key_id: int = typer.Argument(..., help="the key's id (`outbox apikey list`)"),
                  tenant: int = typer.Option(0, help="refuse unless the key is this tenant's (0: any tenant)"),
                  note: str = typer.Option("", help="why (required: every client using it is refused; kept in the "
                                                    "audit log with your name)")) -> None:
    """Revoke one key: refused by every API process within seconds; kept in the audit log with the note."""
    from domain.access.apikeys import revoke_key

    why = require_note(note, "apikey revoke")
    r = revoke_key(key_id, tenant_id=tenant or None, actor_ref=cli_actor(), note=why)
    if r is None:
        err.print(f"[red]error:[/] no API key {key_id}" + (f" for tenant {tenant}" if tenant else ""))
        raise typer.Exit(2)
    what = "was already revoked at" if r.already else "revoked at"
    print(f"key {r.key_id} ({r.prefix}…, tenant {r.tenant_id}) {what} {r.revoked_at:%Y-%m-%d %H:%M:%S} UTC")


def register(apikey: typer.Typer) -> None:
    apikey.command("create")(apikey_create)
    apikey.command("list")(apikey_list)
    apikey.command("revoke")(apikey_revoke)

"""Every irreversible or bulk action leaves exactly one audit row (issue 27, item 2).

Invariant: order cancel, campaign start and cancel, endpoint rotate, disable, enable and delete, API key revoke,
pause, resume, replay, resolve and top-up — each, through its door (the HTTP API where it has one, else the domain
call the dashboard and the command line make), writes ONE `operator_actions` row naming who (the API key's actor,
the operator), what, on what, and the note given. Another tenant's thing is answered exactly as a missing one and
leaves no row; bad input is a clear error and leaves no row; an action that changed nothing (a second cancel,
revoke or replay) leaves none either; the command line wants `--note` and is audited as `cli:<os user>`. The
dashboard's dialogs in a browser: e2e/test_confirm_dialogs.py.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from domain.access.auth import principal_for_key
from domain.db import get_engine
from tests.support.cli import run
from tests.support.people import person
from tests.support.review import failed


def last_action_id() -> int:
    with get_engine().connect() as c:
        return int(c.execute(sa.text("SELECT coalesce(max(id), 0) FROM operator_actions")).scalar_one())


def rows_since(after: int) -> list[dict[str, Any]]:
    with get_engine().connect() as c:
        return [dict(r._mapping) for r in c.execute(sa.text(
            "SELECT tenant_id, actor_ref, action, target, note, at FROM operator_actions WHERE id > :i ORDER BY id"),
            {"i": after})]


class Walk:
    """Runs one action and checks its audit row: exactly one new row, with this actor, action, target, note."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def step(self, act: Any, *, actor: str, action: str, target: str, note: str,
                   tenant: int | None = 42) -> Any:
        before = last_action_id()
        out = act()
        if hasattr(out, "__await__"):
            out = await out
        if hasattr(out, "status_code"):
            assert out.status_code < 300, (action, out.status_code, out.text)
        new = rows_since(before)
        assert len(new) == 1, (action, new)
        (row,) = new
        assert (row["tenant_id"], row["actor_ref"], row["action"]) == (tenant, actor, action), row
        assert row["target"] == target or row["target"].startswith(target + " "), (target, row)
        assert row["note"] == note and row["at"] is not None, row
        self.seen.append(action)
        return out


async def test_every_irreversible_action_leaves_exactly_one_audit_row(db, client, key42):
    from domain.access.apikeys import revoke_key
    from domain.access.auth import create_api_key
    from domain.delivery import review
    from domain.delivery.lanes import set_lane_paused

    key = principal_for_key(key42["Authorization"].removeprefix("Bearer "))
    assert key is not None
    api = key.actor_ref  # the API door is audited as the key's actor
    walk = Walk()

    # Orders: a cancel cannot be undone and tells the customer.
    await walk.step(lambda: client.post("/api/v1/orders/913/cancel", headers=key42, json={
        "expected_revision": 17, "request_id": "walk-cancel", "note": "customer asked by phone"}),
        actor=api, action="order cancel", target="order 913", note="customer asked by phone")

    # Campaigns: start and cancel.
    started = await walk.step(lambda: client.post("/api/v1/campaigns", headers=key42, json={
        "name": "walk", "segment": "all_reachable", "template": "offer", "channel": "email",
        "note": "winter offer"}), actor=api, action="campaign start", target="campaign", note="winter offer")
    cid = started.json()["campaign_id"]
    await walk.step(lambda: client.post(f"/api/v1/campaigns/{cid}/cancel", headers=key42,
                                        json={"note": "wrong segment"}),
                    actor=api, action="campaign cancel", target=f"campaign {cid}", note="wrong segment")

    # Webhook endpoints: rotate, disable, enable, delete (created first; creating is audited too).
    made = await client.post("/api/v1/endpoints", headers=key42, json={"url": "http://93.184.216.34/hooks/walk"})
    assert made.status_code == 201, made.text
    eid = made.json()["id"]
    ep = f"endpoint {eid}"
    await walk.step(lambda: client.post(f"/api/v1/endpoints/{eid}/rotate", headers=key42,
                                        json={"note": "secret pasted in a ticket"}),
                    actor=api, action="rotate webhook endpoint secret", target=ep, note="secret pasted in a ticket")
    await walk.step(lambda: client.post(f"/api/v1/endpoints/{eid}/disable", headers=key42,
                                        json={"note": "receiver down for maintenance"}),
                    actor=api, action="disable webhook endpoint", target=ep, note="receiver down for maintenance")
    await walk.step(lambda: client.post(f"/api/v1/endpoints/{eid}/enable", headers=key42,
                                        json={"note": "maintenance over"}),
                    actor=api, action="enable webhook endpoint", target=ep, note="maintenance over")
    await walk.step(lambda: client.delete(f"/api/v1/endpoints/{eid}", headers=key42,
                                          params={"note": "moved to the new receiver"}),
                    actor=api, action="delete webhook endpoint", target=ep, note="moved to the new receiver")

    # Balance: a top-up keeps its reference and the note.
    await walk.step(lambda: client.post("/api/v1/balance/top-ups", headers=key42, json={
        "amount_cents": 25000, "reference": "INV-WALK-1", "note": "paid by transfer"}),
        actor=api, action="top-up", target="balance +250.00", note="reference INV-WALK-1: paid by transfer")

    # API keys (no API door: the dashboard's and the CLI's call).
    spare = create_api_key(42, "svc:walk", created_by="operator:alice")
    with get_engine().connect() as c:
        kid = int(c.execute(sa.text("SELECT id FROM api_keys WHERE prefix = :p"), {"p": spare[:8]}).scalar_one())
    await walk.step(lambda: revoke_key(kid, tenant_id=42, actor_ref="operator:alice", note="leaked"),
                    actor="operator:alice", action="revoke API key", target=f"key {spare[:8]}…", note="leaked")

    # Lanes: no tenant (a lane carries every tenant's messages).
    await walk.step(lambda: set_lane_paused("bulk", True, actor_ref="operator:pat", note="provider outage"),
                    actor="operator:pat", action="pause", target="lane bulk", note="provider outage", tenant=None)
    await walk.step(lambda: set_lane_paused("bulk", False, actor_ref="operator:pat", note="provider back"),
                    actor="operator:pat", action="resume", target="lane bulk", note="provider back", tenant=None)

    # Review: replay and resolve of FAILED messages (the dashboard's /ops and `outbox replay|resolve` call these).
    rid, _ = person(cap=None)
    a, b = failed(rid), failed(rid)
    await walk.step(lambda: review.replay(42, a, actor_ref="operator:bob", note="receiver fixed"),
                    actor="operator:bob", action="replay", target=f"notification {a}", note="receiver fixed")
    await walk.step(lambda: review.resolve(42, b, actor_ref="operator:bob", note="refunded by phone"),
                    actor="operator:bob", action="resolve", target=f"notification {b}", note="refunded by phone")

    assert sorted(walk.seen) == sorted([
        "order cancel", "campaign start", "campaign cancel", "rotate webhook endpoint secret",
        "disable webhook endpoint", "enable webhook endpoint", "delete webhook endpoint", "top-up",
        "revoke API key", "pause", "resume", "replay", "resolve"]), "the walk covers every action of item 2"


async def test_another_tenants_thing_looks_missing_and_leaves_no_audit_row(db, client, key42):
    """Tenant 42's key on tenant 7's order, campaign and endpoint: 404 exactly as for an id that does not exist,
    nothing changed and nothing audited; a note past 500 characters is a clear 422 and changes nothing."""
    from domain.campaigns import fan_out
    from domain.endpoints import store

    theirs = int(store.create(7, "http://93.184.216.34/hooks/theirs", "", None, "operator:carol")["id"])
    campaign = fan_out.create(tenant_id=7, name="theirs", segment="all_reachable", template="offer",
                              channel="email", actor_ref="operator:carol", note="start")
    before = last_action_id()
    for path, missing in ((f"/api/v1/endpoints/{theirs}/rotate", "/api/v1/endpoints/999999/rotate"),
                          (f"/api/v1/endpoints/{theirs}/disable", "/api/v1/endpoints/999999/disable"),
                          (f"/api/v1/campaigns/{campaign}/cancel", "/api/v1/campaigns/999999/cancel")):
        r = await client.post(path, headers=key42, json={"note": "not mine"})
        m = await client.post(missing, headers=key42, json={"note": "not mine"})
        assert r.status_code == m.status_code == 404 and r.json()["error"] == m.json()["error"], (path, r.text)
    gone = await client.delete(f"/api/v1/endpoints/{theirs}", headers=key42, params={"note": "x"})
    nothing = await client.delete("/api/v1/endpoints/999999", headers=key42, params={"note": "x"})
    assert gone.status_code == nothing.status_code == 404
    cancel = await client.post("/api/v1/orders/700/cancel", headers=key42,
                               json={"expected_revision": 1, "request_id": "x", "note": "not mine"})
    assert cancel.status_code == 404
    long_note = await client.post(f"/api/v1/endpoints/{theirs}/disable", headers=key42, json={"note": "x" * 501})
    assert long_note.status_code == 422
    assert rows_since(before) == [], "nothing happened, so nothing is audited"
    assert store.get(7, theirs)["enabled"] is True


def test_each_things_own_page_reads_who_did_it_from_its_audit_row(db):
    """The reads behind the pages: the keys list names who created and who revoked a key (with the note), an
    endpoint's last action names who and why, and a cancelled order's audit row is found by its page's name for it —
    each only within its tenant."""
    from domain.access import actions
    from domain.access.apikeys import list_keys, revoke_key
    from domain.access.auth import create_api_key
    from domain.endpoints import store
    from domain.orders.commands import execute_order_command
    from domain.orders.views import ORDER_CANCEL, order_target

    key = create_api_key(42, "svc:shop", created_by="operator:alice")
    kept = create_api_key(42, "svc:kept", created_by="operator:bob")
    kid = next(k["id"] for k in list_keys(42) if k["prefix"] == key[:8])
    assert revoke_key(kid, tenant_id=42, actor_ref="operator:alice", note="leaked in a ticket")
    listed = {k["prefix"]: k for k in list_keys(42)}
    assert (listed[key[:8]]["created_by"], listed[key[:8]]["revoked_by"], listed[key[:8]]["revoke_note"]) == (
        "operator:alice", "operator:alice", "leaked in a ticket")
    assert (listed[kept[:8]]["created_by"], listed[kept[:8]]["revoked_by"]) == ("operator:bob", None)

    ep = int(store.create(42, "http://93.184.216.34/hooks/who", "", None, "operator:alice")["id"])
    assert store.last_actions(42, [ep])[ep]["action"] == "create webhook endpoint"
    store.set_enabled(42, ep, False, "operator:bob", note="maintenance")
    last = store.last_actions(42, [ep])[ep]
    assert (last["actor_ref"], last["action"], last["note"]) == ("operator:bob", "disable webhook endpoint",
                                                                 "maintenance")
    assert store.last_actions(7, [ep]) == {}, "another tenant's endpoint has no history to this tenant"

    r = execute_order_command(tenant_id=42, order_id=913, command="cancel", expected_revision=17,
                              actor_ref="operator:bob", request_id="who", note="customer asked")
    assert r.__class__.__name__ == "Committed"
    done = [(a["actor_ref"], a["action"], a["note"]) for a in actions.on_target(42, order_target(913))]
    assert done == [("operator:bob", ORDER_CANCEL, "customer asked")]
    assert actions.on_target(7, order_target(913)) == []
    stale = execute_order_command(tenant_id=42, order_id=913, command="cancel", expected_revision=17,
                                  actor_ref="operator:bob", request_id="who-again", note="twice")
    assert stale.__class__.__name__ == "Reject" and len(actions.on_target(42, order_target(913))) == 1, \
        "a refused cancel changed nothing, so it is not audited"


def test_a_replayed_message_says_who_replayed_it_and_why(db):
    """The message's own page carries its replay's audit row (the row itself keeps only when); another tenant's
    id is a missing message."""
    from datetime import UTC, datetime

    from domain.delivery import review
    from domain.support.message import message_page

    rid, _ = person(cap=None)
    nid = failed(rid)
    assert message_page(42, nid, datetime.now(UTC))["replayed_by"] is None
    assert review.replay(42, nid, actor_ref="operator:bob", note="receiver fixed")
    by = message_page(42, nid, datetime.now(UTC))["replayed_by"]
    assert (by["actor_ref"], by["note"]) == ("operator:bob", "receiver fixed") and by["at"] is not None
    assert message_page(7, nid, datetime.now(UTC)) is None


def test_an_action_that_changed_nothing_is_not_audited_again(db):
    """A second campaign cancel, a second key revoke, a second replay: each changes nothing, so each leaves no row
    (the first one's row is the record)."""
    from domain.access.apikeys import revoke_key
    from domain.access.auth import create_api_key
    from domain.campaigns import fan_out
    from domain.delivery import review

    cid = fan_out.create(tenant_id=42, name="twice", segment="all_reachable", template="offer", channel="email",
                         actor_ref="operator:bob", note="start")
    assert fan_out.cancel(42, cid, actor_ref="operator:bob", note="first") is not None
    key = create_api_key(42, "svc:twice")
    with get_engine().connect() as c:
        kid = int(c.execute(sa.text("SELECT id FROM api_keys WHERE prefix = :p"), {"p": key[:8]}).scalar_one())
    assert revoke_key(kid, tenant_id=42, actor_ref="operator:bob", note="first")
    rid, _ = person(cap=None)
    nid = failed(rid)
    assert review.replay(42, nid, actor_ref="operator:bob", note="first")
    before = last_action_id()
    assert fan_out.cancel(42, cid, actor_ref="operator:bob", note="again") == 0
    assert revoke_key(kid, tenant_id=42, actor_ref="operator:bob", note="again").already  # type: ignore[union-attr]
    assert not review.replay(42, nid, actor_ref="operator:bob", note="again")
    assert rows_since(before) == []


def test_the_command_line_door_wants_a_note_and_is_audited_as_the_os_user(db):
    """`outbox campaign create`, `outbox replay` and `outbox apikey revoke` change what customers get: without
    --note each is exit 2 in words and changes nothing; with it, one row as `cli:<os user>` with the note."""
    from domain.access.auth import create_api_key
    from jobs.cli.console import cli_actor

    rid, _ = person(cap=None)
    nid = failed(rid)
    key = create_api_key(42, "svc:cli")
    with get_engine().connect() as c:
        kid = int(c.execute(sa.text("SELECT id FROM api_keys WHERE prefix = :p"), {"p": key[:8]}).scalar_one())
    doors = [(("campaign", "create", "--tenant", "42", "--name", "cli walk", "--no-follow"), "campaign start"),
             (("replay", str(nid)), "replay"), (("apikey", "revoke", str(kid)), "revoke API key")]
    for args, action in doors:
        before = last_action_id()
        refused = run(*args)
        assert refused.returncode == 2 and "--note" in refused.stderr, (args, refused.stderr)
        assert rows_since(before) == [], f"{action} without a note changed nothing"
        done = run(*args, "--note", "from the terminal")
        assert done.returncode == 0, (args, done.stderr)
        assert [(r["actor_ref"], r["action"], r["note"]) for r in rows_since(before)] == [
            (cli_actor(), action, "from the terminal")]
    with get_engine().connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM campaigns WHERE name = 'cli walk'")).scalar_one() == 1

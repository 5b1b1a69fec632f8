"""Privileged actions are kept and rights are read fresh.

Invariants: every privileged action (replay, resolve, pause, resume, preference change, top-up, key creation)
writes who/what/when in the same transaction as the action; an operator's role and tenant are read from the
database at the moment of a privileged action (a demoted operator loses on-call rights at once); platform on-call
belongs to no tenant and every other role to exactly one (the database refuses anything else); platform on-call's
replay reaches any tenant's row and is kept under that row's tenant.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from domain.access import actions
from domain.access.auth import Principal, create_api_key, login_operator, operator_now
from domain.db import get_engine
from domain.delivery.lanes import set_lane_paused
from domain.delivery.review import replay, resolve
from domain.ledger import metering, recipients


def test_every_privileged_action_leaves_who_what_and_when(db):
    set_lane_paused("bulk", True, actor_ref="operator:alice", note="provider incident")
    set_lane_paused("bulk", False, actor_ref="operator:alice")
    metering.top_up(42, 1_000, "INV-9", "operator:alice")
    ((_, rid),) = recipients.find_by_ref(42, "cust-001")
    recipients.update(42, rid, {"opted_out_channels": ["sms"]}, "operator:bob")
    create_api_key(42, "crm", created_by="cli:ops")
    with get_engine().begin() as c:  # a failed webhook to replay and one to resolve
        for i in (1, 2):
            c.execute(sa.text(
                "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, "
                "status, cost_cents, attempts, max_attempts, reserved_cents) VALUES (42, 'webhook:tenant-42', "
                "'webhook', 'high', 'x', '{}', :k, 'FAILED', 0, 8, 8, 0)"), {"k": f"sec-{i}"})
        ids = c.execute(sa.text("SELECT id FROM notifications WHERE dedupe_key LIKE 'sec-%' ORDER BY id")).scalars()
        first, second = list(ids)
    assert replay(42, first, actor_ref="operator:alice") and resolve(42, second, actor_ref="operator:bob")
    assert not replay(7, second, actor_ref="operator:carol"), "another tenant's row: nothing happens, nothing kept"
    kept = [(a["actor_ref"], a["action"]) for a in reversed(actions.recent(42))]
    assert kept == [("operator:alice", "pause"), ("operator:alice", "resume"), ("operator:alice", "top-up"),
                    ("operator:bob", "preference change"), ("cli:ops", "create API key"),
                    ("operator:alice", "replay"), ("operator:bob", "resolve")]
    assert actions.recent(42)[-1]["note"] == "provider incident"
    assert all(a["actor_ref"] != "operator:carol" for a in actions.recent(7))


def test_role_and_tenant_are_read_fresh_for_privileged_actions(db):
    p = login_operator("alice", "outbox-demo", "10.1.1.1")
    assert p is not None and not hasattr(p, "until") and p.oncall  # type: ignore[union-attr]
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE operators SET role = 'operator' WHERE login = 'alice'"))
    now = operator_now(p.operator_id)  # type: ignore[union-attr,arg-type]
    assert now is not None and now.oncall is False, "demoted: no on-call rights at the next action"
    with get_engine().begin() as c:
        c.execute(sa.text("DELETE FROM operators WHERE login = 'alice'"))
    assert operator_now(p.operator_id) is None  # type: ignore[union-attr,arg-type]


def _failed_webhook(c: sa.Connection, tenant: int, key: str) -> int:
    return int(c.execute(sa.text(
        "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
        "cost_cents, attempts, max_attempts, reserved_cents) VALUES (:t, :r, 'webhook', 'high', 'x', '{}', :k, "
        "'FAILED', 0, 8, 8, 0) RETURNING id"), {"t": tenant, "r": f"webhook:tenant-{tenant}", "k": key}).scalar_one())


def test_platform_on_call_has_no_tenant_and_the_database_refuses_any_other_shape(db):
    p = login_operator("pat", "outbox-demo", "10.1.1.2")
    assert isinstance(p, Principal) and p.role == "platform" and p.tenant_id == 0 and not p.oncall
    s = login_operator("sam", "outbox-demo", "10.1.1.3")
    assert isinstance(s, Principal) and s.role == "support" and s.tenant_id == 42
    for tenant, role in ((42, "platform"), (None, "operator"), (None, "oncall"), (42, "admin")):
        with pytest.raises(IntegrityError), get_engine().begin() as c:
            c.execute(sa.text("INSERT INTO operators (tenant_id, login, display_name, password_hash, role) "
                              "VALUES (:t, :l, 'x', 'x', :r)"), {"t": tenant, "l": f"bad-{role}-{tenant}", "r": role})


def test_platform_replay_reaches_any_tenant_and_is_kept_under_the_rows_tenant(db):
    with get_engine().begin() as c:
        in_7, in_42 = _failed_webhook(c, 7, "plat-7"), _failed_webhook(c, 42, "plat-42")
    assert not replay(42, in_7, actor_ref="operator:alice"), "a tenant's operator never reaches another tenant"
    assert replay(None, in_7, actor_ref="operator:pat") and resolve(None, in_42, actor_ref="operator:pat")
    assert [(a["actor_ref"], a["action"], a["tenant_id"]) for a in actions.recent(7) if a["tenant_id"]] == \
        [("operator:pat", "replay", 7)]
    with get_engine().connect() as c:
        budget = c.execute(sa.text("SELECT max_attempts - attempts FROM notifications WHERE id = :i"),
                           {"i": in_7}).scalar_one()
    from domain.settings import get_settings
    assert budget == get_settings().max_attempts, "a replay grants the configured attempts, no more"

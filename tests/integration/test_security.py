"""Privileged actions are kept and rights are read fresh.

Invariants: every privileged action (replay, resolve, pause, resume, preference change, top-up, key creation)
writes who/what/when in the same transaction as the action; an operator's role and tenant are read from the
database at the moment of a privileged action (a demoted operator loses on-call rights at once).
"""

from __future__ import annotations

import sqlalchemy as sa

from domain import actions, metering, recipients
from domain.auth import create_api_key, login_operator, operator_now
from domain.db import get_engine
from domain.delivery.lanes import set_lane_paused
from domain.delivery.review import replay, resolve


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

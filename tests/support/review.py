"""Review material: a message that really failed, and the operator actions recorded about rows."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery.retry import Fail
from domain.ledger.send import send
from tests.support.long_way import ready, record


def failed(rid: int, lane: str = "normal") -> int:
    """A message that really failed: ledgered, claimed, and answered with a permanent error."""
    nid = send(tenant_id=42, recipient_id=rid, channel="sms", template="offer", lane=lane,
                     data={"headline": "x"}, subject_period=uuid.uuid4().hex).notification_id
    assert record(ready(nid), Fail("contract", review=True), code=400) == "failed"
    return nid


def actions(target_ids: list[int], action: str) -> list[tuple[str, str, str | None]]:
    with get_engine().connect() as c:
        return [tuple(r) for r in c.execute(sa.text(
            "SELECT actor_ref, target, note FROM operator_actions WHERE action = :a AND target = ANY(:t) ORDER BY id"),
            {"a": action, "t": [f"notification {i}" for i in target_ids]})]

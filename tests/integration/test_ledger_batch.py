"""The ledger's way in, several messages in one statement (`ledger_messages`), on real PostgreSQL.

Invariant: a batch writes exactly what the same messages one by one would: one row per dedupe key (a key already
there, or given twice, is a skip that answers the row already there), each with its arq job id and its price, in
the order given; nothing is written unless the caller commits.
"""

from __future__ import annotations

import sqlalchemy as sa

from domain.db import UnitOfWork, get_engine
from domain.invariants import invariant_counts
from domain.ledger.write import NewMessage, ledger_message, ledger_messages
from domain.vocabulary import job_id


def _msg(recipient: str, channel: str = "email", lane: str = "normal") -> NewMessage:
    return NewMessage(tenant_id=42, recipient=recipient, channel=channel, lane=lane, template="order_update",
                      subject="batch-test", payload={"n": 1})


def test_a_batch_writes_one_row_per_key_with_its_job_id_and_answers_skips_with_the_row_there(db):
    """Invariant: dedupe holds inside a batch and against rows already there; job ids and prices are written with
    the rows (no second statement)."""
    with UnitOfWork() as uow:
        first = ledger_message(uow, _msg("cust-001"))
        uow.commit()
    assert first.created
    batch = [_msg("cust-002", "webhook", "high"), _msg("cust-001"), _msg("cust-003"), _msg("cust-002", "webhook",
                                                                                          "high")]
    with UnitOfWork() as uow:
        rows = ledger_messages(uow, batch)
        uow.commit()
    assert [r.created for r in rows] == [True, False, True, False]
    assert rows[1].notification_id == first.notification_id and rows[3].notification_id == rows[0].notification_id
    assert rows[0].notification_id < rows[2].notification_id, "rows are written in the order given"
    assert [r.lane for r in rows] == ["high", "normal", "normal", "high"]
    with get_engine().connect() as c:
        got = c.execute(sa.text(
            "SELECT n.id, n.job_id, n.status, n.cost_cents, coalesce(p.price_cents, 0) AS price "
            "FROM notifications n LEFT JOIN channel_prices p ON p.tenant_id = n.tenant_id AND p.channel = n.channel "
            "WHERE n.dedupe_key LIKE '%batch-test' ORDER BY n.id")).all()
    assert len(got) == 3
    assert all(g.job_id == job_id(g.id) and g.status == "QUEUED" and g.cost_cents == g.price for g in got)
    assert all(r.job_id == job_id(r.notification_id) for r in rows)
    assert not any(invariant_counts().values())


def test_a_batch_the_caller_does_not_commit_leaves_nothing(db):
    """Invariant: the ledger never commits on its own: the caller's rollback takes the batch with it."""
    with UnitOfWork() as uow:
        assert all(r.created for r in ledger_messages(uow, [_msg("cust-001"), _msg("cust-002")]))
    with get_engine().connect() as c:
        n = c.execute(sa.text("SELECT count(*) FROM notifications WHERE dedupe_key LIKE '%batch-test'")).scalar_one()
    assert n == 0

"""Invariant: the migrated schema equals the SQLModel metadata, and the constraints the design relies on exist
and hold on real PostgreSQL."""

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import domain.models  # noqa: F401
from domain.db import get_engine
from domain.retention.months import is_partition


def include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    """Month partitions are made at run time (domain/retention/), not by the models."""
    return not (type_ == "table" and reflected and compare_to is None and is_partition(name))


def test_migrations_match_models(migrated_db):
    with get_engine().connect() as c:
        ctx = MigrationContext.configure(c, opts={"compare_type": True, "include_object": include_object})
        diff = compare_metadata(ctx, SQLModel.metadata)
    assert diff == [], f"schema drift between alembic head and models: {diff}"


def test_partial_unique_index_allows_one_live_intent_per_lead(db):
    with get_engine().begin() as c:
        lead = c.execute(sa.text("INSERT INTO leads (tenant_id, recipient_ref) VALUES (42, 'cust-001') "
                                 "RETURNING id")).scalar_one()
        ins = sa.text("INSERT INTO lead_notification_intents (tenant_id, lead_id, step, status) "
                      "VALUES (42, :l, :s, :st)")
        c.execute(ins, {"l": lead, "s": "initiated", "st": "cancelled"})
        c.execute(ins, {"l": lead, "s": "initiated", "st": "sent"})
        c.execute(ins, {"l": lead, "s": "credit_check_done", "st": "scheduled"})
    with pytest.raises(sa.exc.IntegrityError, match="lead_notification_intents_one_active_per_lead"), \
            get_engine().begin() as c:
        c.execute(ins, {"l": lead, "s": "offers_viewed", "st": "pending"})


def test_balance_can_never_go_negative(db):
    with pytest.raises(sa.exc.IntegrityError, match="balances_never_negative"), get_engine().begin() as c:
        c.execute(sa.text("UPDATE balances SET balance_cents = -1 WHERE tenant_id = 42"))


def test_suppressed_requires_a_reason(db):
    with pytest.raises(sa.exc.IntegrityError, match="notifications_suppressed_has_reason"), \
            get_engine().begin() as c:
        c.execute(sa.text(
            "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
            "cost_cents, attempts, max_attempts) VALUES (42, 'x', 'email', 'normal', 't', '{}', 'k', 'SUPPRESSED', "
            "0, 0, 8)"))


def test_queue_vocabulary_is_the_schemas_vocabulary(db):
    """One home for lanes and job ids: the lane CHECK accepts exactly `LANES`, and the SQL job id is `job_id()`."""
    from domain.delivery.queue import JOB_ID_SQL, LANES, job_id

    ins = sa.text(
        "INSERT INTO notifications (tenant_id, recipient, channel, lane, template, payload, dedupe_key, status, "
        "cost_cents, attempts, max_attempts) VALUES (42, 'x', 'email', :lane, 't', '{}', :k, 'QUEUED', 0, 0, 8) "
        f"RETURNING id, {JOB_ID_SQL} AS job")
    with get_engine().begin() as c:
        for lane in LANES:
            row = c.execute(ins, {"lane": lane, "k": f"k-{lane}"}).one()
            assert row.job == job_id(row.id)
    with pytest.raises(sa.exc.IntegrityError, match="notifications_lane_known"), get_engine().begin() as c:
        c.execute(ins, {"lane": "express", "k": "k-express"})

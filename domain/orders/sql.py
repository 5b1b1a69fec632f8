"""What orders ask of the database, named in one place. Plain CRUD is Core over the one schema; `text()` where
PostgreSQL earns it (the guarded update's RETURNING, the version digests). The ledger rows an order event owes are
not here: they are written through `domain.ledger.write`, the one way in.
"""

from __future__ import annotations

import sqlalchemy as sa

from domain.endpoints.store import targets_scalar
from domain.ledger.views import NOTIFICATION_COLUMNS
from domain.models import Order, table_of

ORDERS = table_of(Order)

# ---- commands ------------------------------------------------------------------------------------------------
# READ_ORDER: a tenant's order as it stands, unlocked.
# A plain read (no FOR UPDATE): the guarded UPDATE below is what settles a race.
READ_ORDER = sa.text(
    "SELECT id, tenant_id, status, revision, customer_ref FROM orders "
    "WHERE tenant_id = :tenant_id AND id = :order_id"
)
# UPDATE_ORDER_GUARDED: an order moved to a status only at the revision it was read at.
UPDATE_ORDER_GUARDED = sa.text(
    "UPDATE orders SET status = :to_status, revision = revision + 1, updated_at = now() "
    "WHERE tenant_id = :tenant_id AND id = :order_id AND revision = :expected_revision "
    "RETURNING revision"
)
# APPLY_COMMAND: an order command applied in one round trip: the guarded update, its event, the fan-out's targets.
# A command in one round trip: the guarded update (its WHERE is the policy's decision, `policy.Guard`), the event's
# envelope only if it matched, and the tenant's endpoints for the fan-out. No row back: nothing changed (missing,
# another tenant's, stale or not allowed); the caller reads the order only then, to say which.
APPLY_COMMAND = sa.text(
    f"""
    WITH upd AS (
      UPDATE orders SET status = :to_status, revision = revision + 1, updated_at = now()
      WHERE tenant_id = :t AND id = :o AND revision = :expected AND status = ANY(CAST(:from_statuses AS text[]))
      RETURNING revision, customer_ref
    ), ev AS (
      INSERT INTO outbox_events (event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type,
                                 schema_version, occurred_at, request_id, causation_id, actor_ref, payload, digest)
      SELECT CAST(:e AS uuid), :t, CAST(:aggregate_type AS text), CAST(:aggregate_id AS text), u.revision,
             CAST(:et AS text), CAST(:schema_version AS integer), CAST(:occurred_at AS timestamptz),
             CAST(:request_id AS text), CAST(:causation_id AS uuid), CAST(:actor_ref AS text),
             CAST(:payload AS jsonb), CAST(:digest AS text)
      FROM upd u
      RETURNING event_id
    )
    SELECT u.revision, u.customer_ref, (SELECT count(*) FROM ev) AS events, {targets_scalar()} AS targets
    FROM upd u
    """
)
# INSERT_ORDER: a new order, answering its id.
INSERT_ORDER = sa.insert(ORDERS).returning(ORDERS.c.id)

# ---- views ---------------------------------------------------------------------------------------------------
# GET_ORDER: one of a tenant's orders.
GET_ORDER = sa.text(
    "SELECT id, tenant_id, status, revision, customer_ref, amount_cents, currency, created_at, updated_at "
    "FROM orders WHERE tenant_id = :t AND id = :o")
# LAST_CHANGE: who moved an order to its current revision.
# Who moved the order to its current revision: the event of that revision (one by the one-event-per-revision key).
LAST_CHANGE = sa.text(
    "SELECT e.actor_ref, e.event_type, e.occurred_at, e.aggregate_revision AS revision FROM orders o "
    "JOIN outbox_events e ON e.tenant_id = o.tenant_id AND e.aggregate_type = 'order' "
    "AND e.aggregate_id = CAST(o.id AS text) AND e.aggregate_revision = o.revision "
    "WHERE o.tenant_id = :t AND o.id = :o")
# ORDER_HISTORY: a keyset page of an order's changes.
# Every change of an order, newest first (its events, one per revision, by the one-event-per-revision key), a
# keyset page by revision: rows older than :b, or just newer than :a (oldest first then). A cancel's note is its
# audit row's, written in the same transaction.
ORDER_HISTORY = sa.text(
    "SELECT e.aggregate_revision AS id, e.event_type, e.actor_ref, e.occurred_at, "
    "CASE WHEN e.event_type = 'order.cancelled' THEN (SELECT a.note FROM operator_actions a "
    "  WHERE a.tenant_id = e.tenant_id AND a.target = :g AND a.action = :cancel "
    "  ORDER BY abs(extract(epoch FROM a.at - e.occurred_at)) LIMIT 1) END AS note "
    "FROM outbox_events e WHERE e.tenant_id = :t AND e.aggregate_type = 'order' AND e.aggregate_id = :o "
    "AND (CAST(:b AS int) IS NULL OR e.aggregate_revision < :b) "
    "AND (CAST(:a AS int) IS NULL OR e.aggregate_revision > :a) "
    "ORDER BY CASE WHEN CAST(:a AS int) IS NULL THEN -e.aggregate_revision ELSE e.aggregate_revision END LIMIT :l")
# ORDER_VERSION: an order's revision and a digest of its ledger rows (a live view's version).
# The order's revision and a digest of its ledger rows (a handful, by the `order_id` index).
ORDER_VERSION = sa.text(
    "SELECT o.revision || ':' || coalesce((SELECT md5(string_agg(n::text, ',' ORDER BY n.id)) "
    "FROM notifications n WHERE n.tenant_id = o.tenant_id AND n.order_id = o.id), '') "
    "FROM orders o WHERE o.tenant_id = :t AND o.id = :o")
# ORDERS_VERSION: a tenant's order count and revision sum (the orders list's version).
# How many orders and the sum of their revisions: one pass over the tenant's entries of the (tenant_id, id) index.
ORDERS_VERSION = sa.text("SELECT count(*) || ':' || coalesce(sum(revision), 0) FROM orders WHERE tenant_id = :t")
# LIST_ORDERS: a keyset page of a tenant's orders, by status.
LIST_ORDERS = sa.text(
    "SELECT id, status, revision, customer_ref, amount_cents, currency, updated_at FROM orders "
    "WHERE tenant_id = :t AND (CAST(:s AS text) IS NULL OR status = :s) "
    "AND (CAST(:b AS bigint) IS NULL OR id < :b) AND (CAST(:a AS bigint) IS NULL OR id > :a) "
    "ORDER BY CASE WHEN CAST(:a AS bigint) IS NULL THEN -id ELSE id END LIMIT :l")
_EVENT_COLUMNS = ("event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, "
                  "schema_version, occurred_at, request_id, causation_id, actor_ref, payload")
# GET_EVENT: one of a tenant's events, with its digest.
GET_EVENT = sa.text(f"SELECT {_EVENT_COLUMNS}, digest FROM outbox_events WHERE tenant_id = :t AND event_id = :e")
# EVENT_NOTIFICATIONS: the messages one event made.
EVENT_NOTIFICATIONS = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS} FROM notifications n WHERE n.tenant_id = :t AND n.event_id = :e ORDER BY n.id")
# ENVELOPE: an event's envelope, by id.
ENVELOPE = sa.text(f"SELECT {_EVENT_COLUMNS} FROM outbox_events WHERE event_id = :e")
# ORDER_NOTIFICATIONS: an order's messages, each with its event's revision.
ORDER_NOTIFICATIONS = sa.text(
    f"SELECT {NOTIFICATION_COLUMNS}, e.aggregate_revision FROM notifications n "
    "JOIN outbox_events e ON e.event_id = n.event_id "
    "WHERE n.tenant_id = :t AND n.order_id = :o ORDER BY n.id DESC LIMIT 20")

# ---- a test event to one endpoint (domain/orders/trial.py): its envelope, and whether one is still owed ---------
# NEXT_TEST_REVISION: the revision of an endpoint's next test event.
# An endpoint's test events are the aggregate ("endpoint", its id): revision n is its n-th test, one per revision.
NEXT_TEST_REVISION = sa.text(
    "SELECT coalesce(max(aggregate_revision), 0) + 1 FROM outbox_events "
    "WHERE tenant_id = :t AND aggregate_type = 'endpoint' AND aggregate_id = :a")
# INSERT_EVENT: one outbox event.
INSERT_EVENT = sa.text(
    "INSERT INTO outbox_events (event_id, tenant_id, aggregate_type, aggregate_id, aggregate_revision, event_type, "
    "schema_version, occurred_at, request_id, causation_id, actor_ref, payload, digest) "
    "VALUES (:e, :t, :aggregate_type, :aggregate_id, :rev, :et, :schema_version, :occurred_at, :request_id, "
    "CAST(:causation_id AS uuid), :actor_ref, CAST(:payload AS jsonb), :digest)")
# TEST_OWED: an endpoint's test message still owed.
TEST_OWED = sa.text(
    "SELECT id FROM notifications WHERE tenant_id = :t AND endpoint_id = :i AND template = :tpl "
    "AND status = 'QUEUED' ORDER BY id LIMIT 1")

"""The data model (names are part of the contract: tests and operators query them).

Alembic migrations are generated from this metadata and a drift test keeps the two equal.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlmodel import Field, SQLModel

from domain.vocabulary import ORDER_STATUSES, lanes_sql_list

NOW = sa.text("now()")


def table_of(model: type[SQLModel]) -> sa.Table:
    """The Core table behind a model, for the inserts that must return ids inside a shared transaction."""
    return model.__table__  # type: ignore[attr-defined,no-any-return]


def _ts(nullable: bool = False, default: bool = True) -> Any:
    return Field(
        default=None,
        sa_column=sa.Column(sa.DateTime(timezone=True), nullable=nullable, server_default=NOW if default else None),
    )


class Tenant(SQLModel, table=True):
    __tablename__ = "tenants"
    __table_args__ = (sa.CheckConstraint("bulk_rate_per_second IS NULL OR bulk_rate_per_second > 0",
                                         name="tenants_bulk_rate_positive"),)
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    name: str
    # This tenant's own cap on its bulk pace, messages per second (None: `OUTBOX_BULK_TENANT_RATE`, if set).
    bulk_rate_per_second: float | None = Field(default=None, sa_column=sa.Column(sa.Float, nullable=True))


class Operator(SQLModel, table=True):
    __tablename__ = "operators"
    __table_args__ = (
        sa.CheckConstraint("role IN ('support','operator','oncall','platform')", name="operators_role_known"),
        sa.CheckConstraint("(role = 'platform') = (tenant_id IS NULL)", name="operators_platform_has_no_tenant"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int | None = Field(default=None, foreign_key="tenants.id", index=True)
    login: str = Field(sa_column=sa.Column(sa.Text, nullable=False, unique=True))
    display_name: str
    password_hash: str
    # What each role may do: domain/access/roles.py. 'platform' has no tenant and owns lanes and fault switches.
    role: str = Field(default="operator", sa_column=sa.Column(sa.Text, nullable=False, server_default="operator"))


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    key_hash: str = Field(sa_column=sa.Column(sa.Text, nullable=False, unique=True))
    prefix: str
    actor_ref: str
    created_at: datetime | None = _ts()
    revoked_at: datetime | None = _ts(nullable=True, default=False)


class Order(SQLModel, table=True):
    __tablename__ = "orders"
    __table_args__ = (
        sa.CheckConstraint("revision >= base_revision", name="orders_revision_not_below_base"),
        sa.CheckConstraint(
            "status IN ({})".format(",".join(f"'{s}'" for s in ORDER_STATUSES)), name="orders_status_known"
        ),
        sa.UniqueConstraint("tenant_id", "id", name="orders_tenant_id_id_key"),
        sa.CheckConstraint("amount_cents >= 0", name="orders_amount_not_negative"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    status: str
    revision: int
    # The revision the order entered the system with (seeded/imported without events). Every revision
    # above it must have an outbox event (invariant 1).
    base_revision: int
    customer_ref: str
    amount_cents: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    currency: str = Field(max_length=3)
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class OutboxEvent(SQLModel, table=True):
    """The immutable envelope. Never updated; the ledger rows carry delivery state."""

    __tablename__ = "outbox_events"
    __table_args__ = (
        sa.UniqueConstraint(
            "tenant_id", "aggregate_type", "aggregate_id", "aggregate_revision",
            name="outbox_events_one_per_revision",
        ),
    )
    event_id: uuid.UUID = Field(sa_column=sa.Column(pg.UUID(as_uuid=True), primary_key=True))
    tenant_id: int = Field(foreign_key="tenants.id")
    aggregate_type: str
    aggregate_id: str
    aggregate_revision: int
    event_type: str
    schema_version: int
    occurred_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    request_id: str
    causation_id: uuid.UUID | None = Field(default=None, sa_column=sa.Column(pg.UUID(as_uuid=True)))
    actor_ref: str
    payload: dict[str, Any] = Field(sa_column=sa.Column(pg.JSONB, nullable=False))
    digest: str
    created_at: datetime | None = _ts()


class Recipient(SQLModel, table=True):
    __tablename__ = "recipients"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "ref", name="recipients_tenant_ref_key"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    ref: str
    display_name: str
    email: str | None = None
    phone: str | None = None
    timezone: str = "UTC"
    quiet_start: time | None = None
    quiet_end: time | None = None
    daily_cap: int | None = None
    opted_out_channels: list[str] = Field(
        default_factory=list,
        sa_column=sa.Column(pg.ARRAY(sa.Text), nullable=False, server_default="{}"),
    )
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class RecipientChange(SQLModel, table=True):
    """Who changed what on a recipient, and when: the answer to "who opted them out of SMS?"."""

    __tablename__ = "recipient_changes"
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    recipient_id: int = Field(foreign_key="recipients.id", index=True)
    actor_ref: str
    field: str
    old_value: str | None = None
    new_value: str | None = None
    changed_at: datetime | None = _ts()


class ChannelPrice(SQLModel, table=True):
    """What one message on a channel costs a tenant (webhooks are free unless priced)."""

    __tablename__ = "channel_prices"
    __table_args__ = (sa.CheckConstraint("price_cents >= 0", name="channel_prices_not_negative"),)
    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True, sa_column_kwargs={"autoincrement": False})
    channel: str = Field(primary_key=True)
    price_cents: int


class Template(SQLModel, table=True):
    """Stored, versioned text. Rendered at send time; the ledger row keeps the version it used. Templates never
    choose recipients (the audience is code)."""

    __tablename__ = "templates"
    __table_args__ = (sa.UniqueConstraint("name", "version", name="templates_name_version_key"),)
    id: int | None = Field(default=None, primary_key=True)
    name: str
    version: int
    channels: list[str] = Field(sa_column=sa.Column(pg.ARRAY(sa.Text), nullable=False))
    body: str
    created_at: datetime | None = _ts()


class RecipientDailyCount(SQLModel, table=True):
    """Messages taken against a recipient's daily cap, per local day: a guarded increment at claim time."""

    __tablename__ = "recipient_daily_counts"
    __table_args__ = (sa.CheckConstraint("taken >= 0", name="recipient_daily_counts_not_negative"),)
    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True, sa_column_kwargs={"autoincrement": False})
    recipient: str = Field(primary_key=True)
    day: date = Field(primary_key=True)
    taken: int = 0


class Notification(SQLModel, table=True):
    """THE ledger: one row per message per channel, written before the send. Partitioned by the month of
    `created_at` (fixed at insert), so `outbox archive` drops a month of messages with its attempts; `dedupe_key` is
    kept once across every month by `ledger_keys` (a partitioned table's unique keys must hold the partition key;
    migration 0028, docs/scaling.md "Partitions and retention")."""

    __tablename__ = "notifications"
    __table_args__ = (
        sa.CheckConstraint(
            "status IN ('QUEUED','SENT','DELIVERED','FAILED','SUPPRESSED')", name="notifications_status_known"
        ),
        sa.CheckConstraint(f"lane IN ({lanes_sql_list()})", name="notifications_lane_known"),
        sa.CheckConstraint(
            "status <> 'SUPPRESSED' OR suppressed_reason IS NOT NULL", name="notifications_suppressed_has_reason"
        ),
        # The relay's claim and the recovery scan read only owed rows: index exactly those.
        sa.Index(
            "notifications_owed", "id", "next_attempt_at", postgresql_where=sa.text("status = 'QUEUED'")
        ),
        # The relay's per-lane window (its oldest owed rows of one lane).
        sa.Index("notifications_owed_by_lane", "lane", "id", postgresql_where=sa.text("status = 'QUEUED'")),
        # A batched lane's drain loop: its lane's due owed rows, oldest due first (sql.CLAIM_BATCH).
        sa.Index("notifications_owed_by_lane_due", "lane", "next_attempt_at", "id",
                 postgresql_where=sa.text("status = 'QUEUED'")),
        # The bulk lane's fair window: each (tenant, campaign) flow's oldest owed rows, and a skip scan of flows.
        sa.Index("notifications_owed_bulk_flow", "tenant_id", sa.text("coalesce(campaign_id, 0)"), "id",
                 postgresql_where=sa.text("status = 'QUEUED' AND lane = 'bulk'")),
        # What a tenant's owed rows hold (a top-up's ceiling sums it under the balance row's lock): retries in
        # progress only, a small set beside a campaign's owed backlog.
        sa.Index("notifications_held_by_owed", "tenant_id",
                 postgresql_where=sa.text("status = 'QUEUED' AND reserved_cents > 0")),
        sa.Index("notifications_recipient_created", "tenant_id", "recipient", "created_at"),
        sa.Index("notifications_provider_reference", "provider_reference"),
        # Not UNIQUE: a replay's key is its `dedupe_key` (kept once in `ledger_keys`) and its claim token.
        sa.Index("notifications_provider_key", "provider_key",
                 postgresql_where=sa.text("provider_key IS NOT NULL")),
        # An endpoint's rows and attempts (its health, its breaker settling what it still owes).
        sa.Index("notifications_endpoint", "endpoint_id", "id", postgresql_where=sa.text("endpoint_id IS NOT NULL")),
        # When a message left the owed set: /ops' chart points still moving read the rows that left after them.
        sa.Index("notifications_done_at", sa.text("coalesce(sent_at, settled_at)"),
                 postgresql_where=sa.text("coalesce(sent_at, settled_at) IS NOT NULL")),
        {"postgresql_partition_by": "RANGE (created_at)"},
    )
    id: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, primary_key=True, autoincrement=True))
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    recipient: str
    channel: str
    lane: str
    template: str
    payload: dict[str, Any] = Field(sa_column=sa.Column(pg.JSONB, nullable=False))
    dedupe_key: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    status: str = "QUEUED"
    suppressed_reason: str | None = None
    # For reasons that need a detail to be plain words: the end of quiet hours, who opted them out and when.
    reason_detail: str | None = None
    template_version: int | None = None
    # Money held for this row (reserved at claim, kept when SENT, refunded when it ends unsent) and the local day
    # whose cap slot it holds.
    reserved_cents: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    cap_day: date | None = None
    review: str | None = None  # NULL | 'needs_review' | 'resolved'
    provider_reference: str | None = None
    cost_cents: int = 0
    attempts: int = 0
    max_attempts: int = 8
    last_error_class: str | None = None
    event_id: uuid.UUID | None = Field(
        default=None,
        sa_column=sa.Column(pg.UUID(as_uuid=True), sa.ForeignKey("outbox_events.event_id"), index=True),
    )
    order_id: int | None = Field(default=None, index=True)
    # Journey nudges: the intent this message belongs to (superseding the intent suppresses its rows).
    intent_id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.ForeignKey("lead_notification_intents.id"), index=True))
    job_id: str | None = None
    # Campaign fan-out: the campaign this message belongs to (its progress is counted from these rows).
    campaign_id: int | None = Field(
        default=None, sa_column=sa.Column(sa.BigInteger, sa.ForeignKey("campaigns.id"), index=True))
    # The partition key: when the row was written, never changed afterwards.
    created_at: datetime | None = Field(
        default=None, sa_column=sa.Column(sa.DateTime(timezone=True), primary_key=True, nullable=False,
                                          server_default=NOW))
    sent_at: datetime | None = _ts(nullable=True, default=False)
    settled_at: datetime | None = _ts(nullable=True, default=False)
    next_attempt_at: datetime | None = _ts()
    # A claim is a lease: a worker that dies mid-send loses it when it expires and the scan re-enqueues.
    leased_until: datetime | None = _ts(nullable=True, default=False)
    # When the last claim decided (send-time eligibility was judged on what was committed then).
    claimed_at: datetime | None = _ts(nullable=True, default=False)
    # The fence: every claim takes the next token, and every write that follows a claim is guarded by it, so a
    # worker whose lease ran out can no longer change the row or move money (domain/delivery/long_way.py).
    claim_token: int = Field(default=0, sa_column=sa.Column(sa.BigInteger, nullable=False, server_default="0"))
    # The idempotency key sent to a provider when it is not `dedupe_key`: set when a bounced message is replayed,
    # so the provider sends it again instead of answering `already_processed`.
    provider_key: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))
    replayed_at: datetime | None = _ts(nullable=True, default=False)
    # The tenant's webhook endpoint this row is for (NULL: the system-wide receiver, or not a webhook). No foreign
    # key: the row outlives a deleted endpoint and keeps saying where it was for (domain/endpoints/).
    endpoint_id: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, nullable=True))


class NotificationAttempt(SQLModel, table=True):
    """One line per attempt. Partitioned by month of its MESSAGE's `created_at` (copied as `notification_created_at`,
    a function of `notification_id`), so a month of the ledger's attempts is one partition that `outbox archive`
    exports and drops whole, and `(notification_id, attempt_no)` stays unique with the partition key beside it
    (domain/retention/, docs/scaling.md "Partitions and retention")."""

    __tablename__ = "notification_attempts"
    __table_args__ = (
        sa.UniqueConstraint("notification_id", "attempt_no", "notification_created_at",
                            name="notification_attempts_once"),
        sa.Index("notification_attempts_fenced", "outcome",
                 postgresql_where=sa.text("outcome IN ('late_accept', 'stale')")),
        {"postgresql_partition_by": "RANGE (notification_created_at)"},
    )
    id: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, primary_key=True, autoincrement=True))
    notification_created_at: datetime = Field(
        sa_column=sa.Column(sa.DateTime(timezone=True), primary_key=True, nullable=False))
    # No foreign key (migration 0028 says why): invariant 12 checks each line's message, id and month, is there.
    notification_id: int = Field(index=True)
    attempt_no: int
    worker: str
    started_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    finished_at: datetime | None = _ts(nullable=True, default=False)
    # sent | already_processed | late_accept | already_recorded | retry | failed | suppressed | stale
    outcome: str
    status_code: int | None = None
    error_class: str | None = None
    latency_ms: float | None = None
    response_excerpt: str | None = None  # the first 200 characters of what the other side answered
    # A retry's answer: when the row is owed again (shown on the message page beside the attempt that caused it).
    next_attempt_at: datetime | None = _ts(nullable=True, default=False)


class Receipt(SQLModel, table=True):
    """A provider's delivery receipt as it arrived. Partitioned by the month it was received; `receipt_id` is kept
    once by `delivery_receipt_keys` (a partitioned table's unique keys must hold the partition key)."""

    __tablename__ = "delivery_receipts"
    __table_args__ = (
        sa.Index("delivery_receipts_pending", "notification_id",
                 postgresql_where=sa.text("applied_at IS NULL AND notification_id IS NOT NULL")),
        # A message's bounces (invariant 9 asks, per accepted attempt older than a replay, whether one came since).
        sa.Index("delivery_receipts_bounced", "notification_id",
                 postgresql_where=sa.text("outcome = 'failed' AND notification_id IS NOT NULL")),
        {"postgresql_partition_by": "RANGE (received_at)"},
    )
    id: int | None = Field(default=None, sa_column=sa.Column(sa.Integer, primary_key=True, autoincrement=True))
    receipt_id: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    provider: str
    provider_reference: str = Field(index=True)
    outcome: str  # delivered | failed
    received_at: datetime | None = Field(default=None, sa_column=sa.Column(
        sa.DateTime(timezone=True), primary_key=True, nullable=False, server_default=NOW))
    # Kept before it can be applied (the send not recorded yet): applied_at NULL until its row is settled, however
    # that happens (domain/ledger/write.py `settle_receipts`, in the settling transaction).
    notification_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger, nullable=True))
    applied_at: datetime | None = _ts(nullable=True, default=False)
    # Set when the receipt was settled without effect, in plain words why ("no longer applies: the message was
    # settled unsent (campaign_cancelled) …", "… DELIVERED is final"); NULL when it was applied.
    closed_reason: str | None = None


class ReceiptKey(SQLModel, table=True):
    """Each provider receipt id once, whatever month it came in (unpartitioned: the uniqueness the partitioned
    `delivery_receipts` cannot hold). Written in the same statement as the receipt; archived with its month."""

    __tablename__ = "delivery_receipt_keys"
    receipt_id: str = Field(primary_key=True)
    received_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True))


class LedgerKey(SQLModel, table=True):
    """Each ledger dedupe key once, whatever month its message is in (unpartitioned: the uniqueness the partitioned
    `notifications` cannot hold). Written in the same statement as the row (domain/ledger/sql.py; a trigger keeps
    it for any other writer); kept after its month is archived, so an archived message is never ledgered again and
    its id still says which month it was in."""

    __tablename__ = "ledger_keys"
    dedupe_key: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    notification_id: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False, index=True))
    created_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    tenant_id: int  # whose message it was: an archived id answers only its own tenant


class LedgerArchive(SQLModel, table=True):
    """A month of the ledger written to a file and dropped (`outbox archive`): its messages' ids answer with it."""

    __tablename__ = "ledger_archives"
    month: date = Field(primary_key=True)
    file: str = Field(sa_column=sa.Column(sa.Text, primary_key=True))
    messages: int
    archived_at: datetime | None = _ts()
    actor_ref: str = Field(sa_column=sa.Column(sa.Text, nullable=False))


class Lead(SQLModel, table=True):
    __tablename__ = "leads"
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    recipient_ref: str
    advisor_ref: str | None = None
    # The furthest funnel step reached; only ever moves forward (domain/journeys/).
    current_step: str | None = None
    # When the event that set `current_step` happened: an older event arriving later is late and dropped.
    last_step_at: datetime | None = _ts(nullable=True, default=False)


class LeadNotificationIntent(SQLModel, table=True):
    __tablename__ = "lead_notification_intents"
    __table_args__ = (
        sa.CheckConstraint(
            "status IN ('pending','scheduled','sent','cancelled','suppressed')", name="lead_intents_status_known"
        ),
        sa.Index(
            "lead_notification_intents_one_active_per_lead",
            "lead_id",
            unique=True,
            postgresql_where=sa.text("status IN ('pending', 'scheduled')"),
        ),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    lead_id: int = Field(foreign_key="leads.id", index=True)
    step: str
    status: str
    scheduled_for: datetime | None = _ts(nullable=True, default=False)
    # Why it ended: "superseded by credit_check_done", "suppressed: quiet hours", "sent".
    final_reason: str | None = None
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()


class Balance(SQLModel, table=True):
    __tablename__ = "balances"
    __table_args__ = (sa.CheckConstraint("balance_cents >= 0", name="balances_never_negative"),)
    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True, sa_column_kwargs={"autoincrement": False})
    # 64-bit: a refund never overflows it (domain/ledger/metering.py `MAX_BALANCE_CENTS` bounds what top-ups add).
    balance_cents: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))


class BalanceEntry(SQLModel, table=True):
    """Every movement of a tenant's balance; they always sum to it (invariant 7)."""

    __tablename__ = "balance_entries"
    __table_args__ = (
        sa.CheckConstraint("kind IN ('opening','top_up','reserve','refund','adjustment')",
                           name="balance_entries_kind_known"),
        # A top-up reference credits once. A message's entries sum to minus what it holds (`reserved_cents`).
        sa.UniqueConstraint("tenant_id", "reference", name="balance_entries_reference_once"),
        sa.Index("balance_entries_notification", "notification_id"),
        # /balance by the hour: the hours with entries (a skip scan), an hour's entries and sums (a range).
        sa.Index("balance_entries_tenant_created", "tenant_id", "created_at"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    # No foreign key: money history outlives its message's month (invariant 16 checks each names a ledgered one).
    notification_id: int | None = Field(default=None, sa_column=sa.Column(sa.BigInteger))
    kind: str = Field(default="reserve", sa_column=sa.Column(sa.Text, nullable=False, server_default="reserve"))
    amount_cents: int
    reason: str
    reference: str | None = None
    actor_ref: str | None = None
    created_at: datetime | None = _ts()


class LaneControl(SQLModel, table=True):
    """Durable pause flag per lane, obeyed by every worker of that lane."""

    __tablename__ = "lane_controls"
    lane: str = Field(primary_key=True)
    paused: bool = False
    updated_at: datetime | None = _ts()


class RefreshLog(SQLModel, table=True):
    """Counts refresh publishes and their measured push latency (written by dashboards, read by ops)."""

    __tablename__ = "refresh_metrics"
    id: int | None = Field(default=None, primary_key=True)
    kind: str  # publish | push
    tenant_id: int
    latency_ms: float | None = None
    created_at: datetime | None = _ts()


class Campaign(SQLModel, table=True):
    """A bulk send: a named segment (code, never a template) × one template × one channel, fanned out into the
    ledger in batches on the bulk lane. Progress is counted from its ledger rows."""

    __tablename__ = "campaigns"
    __table_args__ = (
        sa.CheckConstraint("status IN ('ledgering','running','cancelled','done')", name="campaigns_status_known"),
    )
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    name: str
    segment: str
    template: str
    channel: str
    status: str = "ledgering"
    total: int = 0  # recipients the segment selected when the fan-out began
    ledgered: int = 0
    # Keyset position of the fan-out: a crash resumes after it, and ON CONFLICT skips any overlap.
    last_recipient_id: int = 0
    actor_ref: str
    created_at: datetime | None = _ts()
    started_at: datetime | None = _ts(nullable=True, default=False)
    finished_at: datetime | None = _ts(nullable=True, default=False)


class OtpCode(SQLModel, table=True):
    """A one-time code, never stored: the code is derived at send time from a secret and this row's random nonce;
    only an HMAC of it is kept, to verify what the person types."""

    __tablename__ = "otp_codes"
    notification_id: int = Field(
        sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))  # leaves with its month
    tenant_id: int = Field(foreign_key="tenants.id")
    nonce: str
    code_hash: str
    expires_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    tries: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    verified_at: datetime | None = _ts(nullable=True, default=False)


class OperatorAction(SQLModel, table=True):
    """Every privileged action: who, what, on what, when, note (domain/access/actions.py). Lane controls have no
    tenant."""

    __tablename__ = "operator_actions"
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int | None = Field(default=None, foreign_key="tenants.id", index=True)
    actor_ref: str
    action: str
    target: str
    note: str | None = None
    at: datetime | None = _ts()


class OperatorSession(SQLModel, table=True):
    """A dashboard login kept in an HttpOnly cookie (only its SHA-256 is stored): every tab of the browser shares
    it. A new one at every login; ended at logout (every tab loses it on its next step) or when it expires."""

    __tablename__ = "operator_sessions"
    __table_args__ = (sa.Index("operator_sessions_ticket", "ticket_hash", unique=True,
                               postgresql_where=sa.text("ticket_hash IS NOT NULL")),)
    token_hash: str = Field(primary_key=True)
    operator_id: int = Field(sa_column=sa.Column(sa.BigInteger, sa.ForeignKey("operators.id", ondelete="CASCADE"),
                                                 nullable=False, index=True))
    # "ticket": minted by the login handler, exchanged once for the cookie within seconds; "session": the cookie.
    kind: str = Field(default="session", sa_column=sa.Column(sa.Text, nullable=False, server_default="session"))
    created_at: datetime | None = _ts()
    expires_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    ended_at: datetime | None = _ts(nullable=True, default=False)
    # A session: the hash of the ticket it was bought with (the tab that logged in finds its session by it).
    ticket_hash: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))


class LoginThrottle(SQLModel, table=True):
    """Failed logins per login and per client address, and the lockout they earned."""

    __tablename__ = "login_throttle"
    key: str = Field(primary_key=True)  # "login:<login>" | "client:<address>"
    failures: int = 0
    locked_until: datetime | None = _ts(nullable=True, default=False)
    updated_at: datetime | None = _ts()


class LeadEvent(SQLModel, table=True):
    """Every journey or lifecycle event received for a lead, with the decision it got. The same `event_id` again
    is a duplicate: it gets the first answer and writes nothing."""

    __tablename__ = "lead_events"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "event_id", name="lead_events_event_id_once"),)
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id")
    lead_id: int = Field(foreign_key="leads.id", index=True)
    event_id: str
    event: str
    occurred_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    received_at: datetime | None = _ts()
    outcome: str | None = None
    answer: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(pg.JSONB, nullable=True))
    applied_at: datetime | None = _ts(nullable=True, default=False)  # clock time just before its commit


class IdempotencyKey(SQLModel, table=True):
    """An `Idempotency-Key` a tenant sent on a creating POST, with the first answer, replayed to the same request
    until `expires_at` (domain/access/idempotency.py). `status` NULL: the first request is still running (it holds
    the key until `locked_until`, so a crashed request does not hold it for a day)."""

    __tablename__ = "idempotency_keys"
    tenant_id: int = Field(foreign_key="tenants.id", primary_key=True)
    key: str = Field(primary_key=True)
    request_digest: str
    method: str
    path: str
    status: int | None = None
    content_type: str | None = None
    response_body: bytes | None = Field(default=None, sa_column=sa.Column(sa.LargeBinary, nullable=True))
    created_at: datetime | None = _ts()
    locked_until: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    expires_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False, index=True))


class WebhookEndpoint(SQLModel, table=True):
    """A tenant's webhook endpoint (Svix's model): its URL, the event types it wants (NULL: every type), its
    signing secret and, for 24 h after a rotation, the previous one (both sign meanwhile). Disabled endpoints
    receive nothing. domain/endpoints/."""

    __tablename__ = "webhook_endpoints"
    id: int | None = Field(default=None, primary_key=True)
    tenant_id: int = Field(foreign_key="tenants.id", index=True)
    url: str
    description: str = ""
    event_types: list[str] | None = Field(default=None, sa_column=sa.Column(pg.JSONB, nullable=True))
    secret: str
    previous_secret: str | None = None
    previous_secret_until: datetime | None = _ts(nullable=True, default=False)
    disabled_at: datetime | None = _ts(nullable=True, default=False)
    created_at: datetime | None = _ts()
    updated_at: datetime | None = _ts()
    # The circuit breaker (domain/endpoints/breaker.py): failed attempts in a row and since when, until when sends
    # are deferred, and why it was disabled (by whom, or automatically after sustained failure).
    failure_streak: int = Field(default=0, sa_column=sa.Column(sa.Integer, nullable=False, server_default="0"))
    failing_since: datetime | None = _ts(nullable=True, default=False)
    breaker_open_until: datetime | None = _ts(nullable=True, default=False)
    disabled_reason: str | None = Field(default=None, sa_column=sa.Column(sa.Text, nullable=True))


class OpsSeriesPoint(SQLModel, table=True):
    """A finished point of /ops' charts (its span ended a minute ago or more), computed once from the ledger and
    kept: a refresh computes only the points still moving. `scope` is the tenant, 0 for every tenant. A point keeps
    the worst of its span (the most rows owed at once, the oldest owed age at its oldest), the rows sent in it (a
    count) and their mean and slowest commit-to-send seconds — never a value read at the span's end alone."""

    __tablename__ = "ops_series_points"
    scope: int = Field(primary_key=True)
    step_minutes: int = Field(primary_key=True)
    t: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), primary_key=True, nullable=False))
    depth_max: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    oldest_max_seconds: float
    sent: int = Field(sa_column=sa.Column(sa.BigInteger, nullable=False))
    latency_mean_seconds: float
    latency_max_seconds: float
    computed_at: datetime | None = _ts()

"""The ledger across channels: what was sent, to whom, what it cost, whether it arrived, and why not."""

from __future__ import annotations

import asyncio

import reflex as rx

from dashboard import routes
from dashboard.components import Row, data_table, loading, shell, stat, status_badge
from dashboard.events import Followup, event
from dashboard.format import money, notification
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.delivery.queue import LANES
from domain.ledger import views as ledger_views

ALL = "all"
FILTERS = ("channel", "status", "lane", "window")


class LedgerState(AuthState):
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    channels: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    channel: rx.Field[str] = rx.field(ALL)
    status: rx.Field[str] = rx.field(ALL)
    lane: rx.Field[str] = rx.field(ALL)
    window: rx.Field[str] = rx.field("24h")
    recipient: rx.Field[str] = rx.field("")
    total: rx.Field[str] = rx.field("0")
    cost: rx.Field[str] = rx.field(money(0))
    delivery_rate: rx.Field[str] = rx.field("—")
    suppressed: rx.Field[str] = rx.field("0")
    failed: rx.Field[str] = rx.field("0")
    queued: rx.Field[str] = rx.field("0")
    is_loading: rx.Field[bool] = rx.field(True)

    @event
    async def load(self) -> None:
        if not self._tenant_id:
            return
        hours = {"1h": 1, "24h": 24, "7d": 168}.get(self.window)
        f = ledger_views.LedgerFilter(
            channel=None if self.channel == ALL else self.channel, status=None if self.status == ALL else self.status,
            lane=None if self.lane == ALL else self.lane, recipient=self.recipient.strip() or None,
            since_hours=hours, limit=200)
        data = await asyncio.to_thread(ledger_views.ledger, self._tenant_id, f)
        t = data["totals"]
        self.rows = [notification(n) for n in data["rows"]]
        self.channels = [{
            "channel": c["channel"], "total": str(c["total"]), "delivered": str(c["delivered"]),
            "rate": f"{c['delivery_rate'] * 100:.0f}%" if c["delivery_rate"] is not None else "—",
            "suppressed": str(c["suppressed"]), "failed": str(c["failed"]), "cost": money(c["cost_cents"]),
        } for c in data["channels"]]
        self.total, self.cost = str(t["total"]), money(t["cost_cents"])
        self.delivery_rate = f"{t['delivery_rate'] * 100:.0f}%" if t["delivery_rate"] is not None else "—"
        self.suppressed, self.failed, self.queued = str(t["suppressed"]), str(t["failed"]), str(t["queued"])
        self.is_loading = False

    @event
    async def set_filter(self, name: str, value: str) -> Followup:
        if name in FILTERS:  # the browser names the filter; only these four may be set
            setattr(self, name, value)
        return LedgerState.load

    @event
    async def search_recipient(self, form: dict[str, str]) -> Followup:
        self.recipient = form.get("recipient", "")
        return LedgerState.load


def _row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.text(n["created"], size="1")),
        rx.table.cell(n["channel"]),
        rx.table.cell(rx.badge(n["lane"], variant="outline")),
        rx.table.cell(n["recipient"]),
        rx.table.cell(rx.text(n["template"], size="1")),
        rx.table.cell(rx.vstack(status_badge(n["status"]),
                                rx.cond(n["reason"] != "", rx.text(n["reason"], size="1",
                                                                   color=rx.color("gray", 11))), spacing="1")),
        rx.table.cell(n["attempts"]),
        rx.table.cell(n["cost"]),
        rx.table.cell(rx.link(rx.code(n["event_short"]), href=f"/audit?q={n['event_id']}")),
        data_testid="ledger-row",
    )


def _channel_row(c: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(c["channel"], on_click=LedgerState.set_filter("channel", c["channel"]),
                              weight="bold", cursor="pointer")),
        rx.table.cell(c["total"]), rx.table.cell(c["delivered"]), rx.table.cell(c["rate"]),
        rx.table.cell(c["suppressed"]), rx.table.cell(c["failed"]), rx.table.cell(c["cost"]),
        data_testid="channel-row",
    )


def _filter(label: str, name: str, items: list[str]) -> rx.Component:
    return rx.vstack(rx.text(label, size="1", color=rx.color("gray", 11)),
                     rx.select(items, value=getattr(LedgerState, name),
                               on_change=lambda v: LedgerState.set_filter(name, v), size="2"), spacing="1")


def ledger_page() -> rx.Component:
    return shell(
        "Ledger",
        rx.flex(
            stat("Messages", LedgerState.total, "ledger-total"),
            stat("Cost (sent)", LedgerState.cost, "ledger-cost"),
            stat("Delivery rate", LedgerState.delivery_rate, "ledger-rate", "green"),
            stat("Queued", LedgerState.queued, colour="amber"),
            stat("Suppressed", LedgerState.suppressed),
            stat("Failed", LedgerState.failed, colour="red"),
            gap="12px", wrap="wrap", width="100%", margin_bottom="16px",
        ),
        rx.box(data_table(["Channel", "Messages", "Delivered", "Delivery rate", "Suppressed", "Failed", "Cost"],
                          LedgerState.channels, _channel_row, "No messages in this window.", "channel-table"),
               margin_bottom="16px", width="100%"),
        rx.flex(
            _filter("Channel", "channel", [ALL, "webhook", "email", "sms", "whatsapp"]),
            _filter("Status", "status", [ALL, "QUEUED", "SENT", "DELIVERED", "FAILED", "SUPPRESSED"]),
            _filter("Lane", "lane", [ALL, *LANES]),
            _filter("Window", "window", ["1h", "24h", "7d", ALL]),
            rx.form(rx.vstack(rx.text("Recipient", size="1", color=rx.color("gray", 11)),
                              rx.hstack(rx.input(name="recipient", placeholder="cust-001", size="2"),
                                        rx.button("Filter", size="2", type="submit")), spacing="1"),
                    on_submit=LedgerState.search_recipient),
            gap="12px", wrap="wrap", align="end", margin_bottom="16px",
        ),
        loading(LedgerState.is_loading,
                data_table(["Created (UTC)", "Channel", "Lane", "Recipient", "Template", "Status", "Attempts",
                            "Cost", "Event"], LedgerState.rows, _row, "No messages match these filters.",
                           "ledger-table")),
    )


PAGE = Page(routes.LEDGER, ledger_page, "Ledger · Outbox", [AuthState.require_login, LedgerState.load],
            ("Ledger", "book-open"))

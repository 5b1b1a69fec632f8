"""The ledger across channels: what was sent, to whom, what it cost, whether it arrived, and why not."""

from __future__ import annotations

import asyncio

import reflex as rx

from dashboard import routes
from dashboard.components import data_table, loading, shell, stat, status_badge
from dashboard.format import money, notification
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.delivery.queue import LANES
from domain.ledger import views as ledger_views

ALL = "all"
FILTERS = ("channel", "status", "lane", "window")


class LedgerState(AuthState):
    rows: list[dict[str, str]] = []
    channels: list[dict[str, str]] = []
    channel: str = ALL
    status: str = ALL
    lane: str = ALL
    window: str = "24h"
    recipient: str = ""
    total: str = "0"
    cost: str = money(0)
    delivery_rate: str = "—"
    suppressed: str = "0"
    failed: str = "0"
    queued: str = "0"
    is_loading: bool = True

    @rx.event
    async def load(self):  # type: ignore[no-untyped-def]
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

    @rx.event
    async def set_filter(self, name: str, value: str):  # type: ignore[no-untyped-def]
        if name in FILTERS:  # the browser names the filter; only these four may be set
            setattr(self, name, value)
        return LedgerState.load

    @rx.event
    async def search_recipient(self, form: dict[str, str]):  # type: ignore[no-untyped-def]
        self.recipient = form.get("recipient", "")
        return LedgerState.load


def _row(n: rx.Var) -> rx.Component:
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


def _channel_row(c: rx.Var) -> rx.Component:
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

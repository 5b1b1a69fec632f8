"""The ledger across channels: what was sent, to whom, what it cost, whether it arrived, and why not."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import reflex as rx

from dashboard import paging, routes
from dashboard.components import Row, caption, data_table, labelled, loading, shell, stat, status_badge
from dashboard.events import Followup, event
from dashboard.format import money, notification, rate_text, search_text
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.delivery.queue import LANES
from domain.ledger import views as ledger_views
from domain.support import ledger as support_ledger
from domain.support.export import ledger_csv

ALL = "all"
FILTERS = ("channel", "status", "lane", "window")
CHOICES = {"channel": ("webhook", "email", "sms", "whatsapp"), "status": ("QUEUED", "SENT", "DELIVERED", "FAILED",
                                                                        "SUPPRESSED"),
           "lane": tuple(LANES), "window": ("1h", "24h", "7d")}
PAGE_SIZE = 200


class LedgerState(paging.KeysetPaged, AuthState):
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    channels: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    channel: rx.Field[str] = rx.field(ALL)
    status: rx.Field[str] = rx.field(ALL)
    lane: rx.Field[str] = rx.field(ALL)
    window: rx.Field[str] = rx.field("24h")
    recipient: rx.Field[str] = rx.field("")
    total: rx.Field[str] = rx.field("0")
    charged: rx.Field[str] = rx.field(money(0))
    reserved: rx.Field[str] = rx.field(money(0))
    refunded: rx.Field[str] = rx.field(money(0))
    delivery_rate: rx.Field[str] = rx.field("—")
    suppressed: rx.Field[str] = rx.field("0")
    failed: rx.Field[str] = rx.field("0")
    queued: rx.Field[str] = rx.field("0")
    is_loading: rx.Field[bool] = rx.field(True)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)

    def _filter(self, limit: int = PAGE_SIZE) -> ledger_views.LedgerFilter:
        return ledger_views.LedgerFilter(
            channel=None if self.channel == ALL else self.channel, status=None if self.status == ALL else self.status,
            lane=None if self.lane == ALL else self.lane, recipient=self.recipient.strip()[:64] or None,
            since_hours={"1h": 1, "24h": 24, "7d": 168}.get(self.window), limit=limit,
            before_id=self._before or None, after_id=self._after or None)

    def _url(self) -> Followup:
        """The filters and the page position in the URL: the view is a link (replaced, no reload)."""
        where = paging.url(routes.LEDGER, {"channel": self.channel if self.channel != ALL else "",
                                           "status": self.status if self.status != ALL else "",
                                           "lane": self.lane if self.lane != ALL else "",
                                           "window": self.window if self.window != "24h" else "",
                                           "recipient": self.recipient.strip(), "before": self._before,
                                           "after": self._after})
        return rx.call_script(f"window.history.replaceState(null, '', {json.dumps(where)})")

    @event
    async def load(self) -> None:
        """A page load: filters and position from the URL (anything unknown is ignored), then the rows."""
        params = self.router.url.query_parameters
        for name, choices in CHOICES.items():
            value = params.get(name, "")
            setattr(self, name, value if value in choices else ("24h" if name == "window" else ALL))
        if params.get("window") == ALL:
            self.window = ALL
        self.recipient = search_text(params.get("recipient", ""), 64)
        before, after = paging.position(params)
        self._before, self._after = before or 0, after or 0
        await self._query()

    async def _query(self) -> None:
        if not await self._fresh() or not self._tenant_id:
            return
        data = await asyncio.to_thread(support_ledger.ledger, self._tenant_id, self._filter(), datetime.now(UTC))
        self.has_older = bool(data["more"]) or bool(self._after)
        self.has_newer = bool(self._before) or (bool(self._after) and bool(data["more"]))
        t = data["totals"]
        self.rows = [notification(n) for n in data["rows"]]
        self.channels = [{
            "channel": c["channel"], "total": str(c["total"]), "attempted": str(c["attempted_final"]),
            "delivered": str(c["delivered"]), "rate": rate_text(c["delivered"], c["attempted_final"]),
            "suppressed": str(c["suppressed"]), "failed": str(c["failed"]), "charged": money(c["charged_cents"]),
        } for c in data["channels"]]
        self.total = str(t["total"])
        self.charged, self.reserved = money(t["charged_cents"]), money(t["reserved_cents"])
        self.refunded = money(t["refunded_cents"])
        self.delivery_rate = rate_text(t["delivered"], t["attempted_final"])
        self.suppressed, self.failed, self.queued = str(t["suppressed"]), str(t["failed"]), str(t["queued"])
        self.is_loading = False

    @event
    async def set_filter(self, name: str, value: str) -> Followup:
        if name in FILTERS and (value in CHOICES[name] or value == ALL):  # only these four, only known values
            setattr(self, name, value)
        self._before = self._after = 0
        await self._query()
        return self._url()

    @event
    async def search_recipient(self, form: dict[str, str]) -> Followup:
        self.recipient = search_text(form.get("recipient", ""), 64)
        self._before = self._after = 0
        await self._query()
        return self._url()

    @event
    async def export(self) -> Followup:
        """The filtered view (every page of it) as CSV: recipients by ref, no phone or email."""
        if not await self._fresh() or not self._tenant_id:
            return None
        f = self._filter()
        data = await asyncio.to_thread(ledger_csv, self._tenant_id, ledger_views.LedgerFilter(
            channel=f.channel, status=f.status, lane=f.lane, recipient=f.recipient, since_hours=f.since_hours))
        return rx.download(data=data, filename=f"ledger-{datetime.now(UTC):%Y%m%d-%H%M%S}.csv")


def _row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link("#" + n["id"], href="/messages/" + n["id"], data_testid="message-link")),
        rx.table.cell(rx.text(n["created"], size="1")),
        rx.table.cell(n["channel"]),
        rx.table.cell(rx.badge(n["lane"], variant="outline")),
        rx.table.cell(n["recipient"]),
        rx.table.cell(rx.text(n["template"], size="1")),
        rx.table.cell(rx.vstack(status_badge(n["status"]),
                                rx.cond(n["resolved"] != "", rx.badge(n["resolved"], color_scheme="gray",
                                                                      variant="outline", size="1",
                                                                      data_testid="ledger-row-resolved")),
                                rx.cond(n["reason"] != "", caption(n["reason"])), spacing="1")),
        rx.table.cell(n["attempts"]),
        rx.table.cell(rx.text(n["cost"], data_testid="ledger-row-cost")),
        rx.table.cell(rx.link(rx.code(n["event_short"]), href=f"/audit?q={n['event_id']}")),
        data_testid="ledger-row",
    )


def _channel_row(c: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(c["channel"], on_click=LedgerState.set_filter("channel", c["channel"]),
                              weight="bold", cursor="pointer")),
        rx.table.cell(c["total"]), rx.table.cell(c["attempted"]), rx.table.cell(c["delivered"]),
        rx.table.cell(rx.text(c["rate"], data_testid="channel-rate")),
        rx.table.cell(c["suppressed"]), rx.table.cell(c["failed"]), rx.table.cell(c["charged"]),
        data_testid="channel-row",
    )


def _filter(label: str, name: str, items: list[str]) -> rx.Component:
    return labelled(label, rx.select(items, value=getattr(LedgerState, name),
                                     on_change=lambda v: LedgerState.set_filter(name, v), size="2"))


def ledger_page() -> rx.Component:
    return shell(
        "Ledger",
        rx.flex(
            stat("Messages", LedgerState.total, "ledger-total"),
            stat("Charged", LedgerState.charged, "ledger-charged"),
            stat("Reserved (queued)", LedgerState.reserved, "ledger-reserved"),
            stat("Refunded", LedgerState.refunded, "ledger-refunded"),
            stat("Delivery rate", LedgerState.delivery_rate, "ledger-rate", "green"),
            stat("Queued", LedgerState.queued, colour="amber"),
            stat("Suppressed (not attempted)", LedgerState.suppressed, "ledger-suppressed"),
            stat("Failed", LedgerState.failed, colour="red"),
            gap="12px", wrap="wrap", width="100%", margin_bottom="16px",
        ),
        rx.box(data_table(["Channel", "Messages", "Attempted", "Delivered", "Delivery rate", "Suppressed", "Failed",
                           "Charged"],
                          LedgerState.channels, _channel_row, "No messages in this window.", "channel-table"),
               margin_bottom="16px", width="100%"),
        rx.flex(
            _filter("Channel", "channel", [ALL, "webhook", "email", "sms", "whatsapp"]),
            _filter("Status", "status", [ALL, "QUEUED", "SENT", "DELIVERED", "FAILED", "SUPPRESSED"]),
            _filter("Lane", "lane", [ALL, *LANES]),
            _filter("Window", "window", ["1h", "24h", "7d", ALL]),
            rx.form(labelled("Recipient", rx.hstack(rx.input(name="recipient", placeholder="cust-001", size="2"),
                                                    rx.button("Filter", size="2", type="submit"))),
                    on_submit=LedgerState.search_recipient),
            gap="12px", wrap="wrap", align="end", margin_bottom="16px",
        ),
        rx.hstack(rx.button("Export CSV", on_click=LedgerState.export, variant="soft", size="1",
                            data_testid="ledger-export"),
                  paging.pager(LedgerState.older, LedgerState.newer, LedgerState.has_older, LedgerState.has_newer,
                               "ledger-pager"), width="100%", align="center"),
        loading(LedgerState.is_loading,
                data_table(["Message", "Created (UTC)", "Channel", "Lane", "Recipient", "Template", "Status",
                            "Attempts", "Cost", "Event"], LedgerState.rows, _row, "No messages match these filters.",
                           "ledger-table")),
    )


PAGE = Page(routes.LEDGER, ledger_page, "Ledger · Outbox", [AuthState.require_login, LedgerState.load],
            ("Ledger", "book-open"))

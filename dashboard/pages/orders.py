"""Orders list: the tenant's orders, newest first, filtered by status, a keyset page at a time (older / newer) with
the filter and the page in the URL, refreshed live on any order change."""

from __future__ import annotations

import asyncio
import contextlib
import functools

import reflex as rx

from dashboard import paging, routes
from dashboard.components import Row, caption, data_table, loading, shell, status_badge
from dashboard.events import Followup, event
from dashboard.format import money, when
from dashboard.live_task import LiveTask
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.delivery.queue import tenant_channel
from domain.orders import views as order_views
from domain.support import pages
from domain.vocabulary import ORDER_STATUSES

PAGE_SIZE = 100


class OrdersState(paging.KeysetPaged, AuthState):
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    status_filter: rx.Field[str] = rx.field("all")
    is_loading: rx.Field[bool] = rx.field(True)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)
    _version: str = ""  # backend-only: `order_views.orders_version` read just before `rows`

    @event
    async def load(self) -> Followup:
        """A page load: the filter and the position from the URL (anything unknown is ignored), then the rows."""
        params = self.router.url.query_parameters
        status = params.get("status", "")
        self.status_filter = status if status in ORDER_STATUSES else "all"
        before, after = paging.position(params)
        self._before, self._after = before or 0, after or 0
        if not self._tenant_id:
            return None
        await self._query()
        self.is_loading = False
        return OrdersState.watch

    async def _query(self) -> None:
        if not await self._fresh() or not self._tenant_id:
            return
        self._version, rows, older, newer = await asyncio.to_thread(
            self._fetch_for, self._tenant_id, self.status_filter, self._before, self._after)
        self.rows, self.has_older, self.has_newer = rows, older, newer

    def _url(self) -> Followup:
        return paging.replace_url(routes.ORDERS, {
            "status": self.status_filter if self.status_filter != "all" else "", "before": self._before,
            "after": self._after})

    @event
    async def set_status_filter(self, value: str) -> Followup:
        if not self._tenant_id or value not in ("all", *ORDER_STATUSES):
            return None  # logged out, or a value the select never offers: nothing changes
        self.status_filter, self._before, self._after = value, 0, 0
        await self._query()
        return self._url()

    @event(background=True)
    async def watch(self) -> None:
        task, seen = await LiveTask.start_reading(self, lambda: self._version)
        tenant = task.tenant
        if not tenant:
            return  # a live task needs a logged-in operator of a tenant
        view = task.view(tenant_channel(tenant), functools.partial(order_views.orders_version, tenant), seen)
        async with contextlib.aclosing(view.hints()) as hints:
            async for _ in hints:
                async with self:
                    if not task.still_mine():
                        return
                    snapshot = (self.status_filter, self._before, self._after)
                version, rows, older, newer = await task.read(asyncio.to_thread(self._fetch_for, tenant, *snapshot))
                async with self:
                    if not task.still_mine():
                        return
                    if (self.status_filter, self._before, self._after) == snapshot:  # else: moved meanwhile
                        self._version, self.rows, self.has_older, self.has_newer = version, rows, older, newer
                view.seen = version

    @staticmethod
    def _fetch_for(tenant: int, status_filter: str, before: int,
                   after: int) -> tuple[str, list[dict[str, str]], bool, bool]:
        """The version first, then the rows: the rows are at least as new as the version they are shown with."""
        version = order_views.orders_version(tenant)
        status = None if status_filter == "all" else status_filter
        page = pages.orders(tenant, status, PAGE_SIZE, before or None, after or None)
        return version, [{"id": str(o["id"]), "status": o["status"], "revision": str(o["revision"]),
                          "customer": o["customer_ref"], "amount": money(o["amount_cents"], o["currency"]),
                          "updated": when(o["updated_at"])} for o in page.rows], page.has_older, page.has_newer


def _row(o: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(f"#{o['id']}", href=f"/orders/{o['id']}", weight="bold",
                              data_testid="order-link")),
        rx.table.cell(o["customer"]),
        rx.table.cell(o["amount"]),
        rx.table.cell(status_badge(o["status"])),
        rx.table.cell(o["revision"]),
        rx.table.cell(caption(o["updated"])),
        data_testid="order-row",
    )


def orders_page() -> rx.Component:
    return shell(
        "Orders",
        paging.pager(OrdersState.older, OrdersState.newer, OrdersState.has_older, OrdersState.has_newer,
                     "orders-pager"),
        loading(
            OrdersState.is_loading,
            data_table(["Order", "Customer", "Amount", "Status", "Revision", "Updated (UTC)"], OrdersState.rows,
                       _row, "No orders match this filter.", "orders-table"),
        ),
        actions=rx.select(["all", *ORDER_STATUSES], value=OrdersState.status_filter,
                          on_change=OrdersState.set_status_filter, size="2"),
    )


PAGE = Page(routes.ORDERS, orders_page, "Orders · Outbox", [AuthState.require_login, OrdersState.load],
            ("Orders", "shopping-cart"))

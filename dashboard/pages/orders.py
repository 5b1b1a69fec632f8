"""Orders list: the tenant's orders, filtered by status, refreshed live on any order change."""

from __future__ import annotations

import asyncio
import contextlib
import functools

import reflex as rx

from dashboard import live, routes
from dashboard.components import Row, data_table, loading, shell, status_badge
from dashboard.events import Followup, event
from dashboard.format import money, when
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.delivery.queue import tenant_channel
from domain.orders import views as order_views
from domain.vocabulary import ORDER_STATUSES


class OrdersState(AuthState):
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    status_filter: rx.Field[str] = rx.field("all")
    is_loading: rx.Field[bool] = rx.field(True)
    _version: str = ""  # backend-only: `order_views.orders_version` read just before `rows`

    @event
    async def load(self) -> Followup:
        if not self._tenant_id:
            return None
        self._version, self.rows = await asyncio.to_thread(self._fetch_for, self._tenant_id, self.status_filter)
        self.is_loading = False
        return OrdersState.watch

    @event
    async def set_status_filter(self, value: str) -> None:
        if not self._tenant_id or value not in ("all", *ORDER_STATUSES):
            return  # logged out, or a value the select never offers: nothing changes
        self.status_filter = value
        self._version, self.rows = await asyncio.to_thread(self._fetch_for, self._tenant_id, self.status_filter)

    @event(background=True)
    async def watch(self) -> None:
        still_wanted = live.take_over_watch(self.router.session.client_token)
        async with self:
            session, seen = self._session(), self._version
        tenant = session[0]
        if not tenant:
            return  # a live task needs a logged-in operator of a tenant
        view = live.view(tenant_channel(tenant), still_wanted, functools.partial(order_views.orders_version, tenant), seen)
        async with contextlib.aclosing(view.hints()) as hints:
            async for _ in hints:
                async with self:
                    if self._session() != session:
                        return
                    status_filter_snapshot = self.status_filter
                version, rows = await asyncio.to_thread(self._fetch_for, tenant, status_filter_snapshot)
                async with self:
                    if self._session() != session:
                        return
                    self._version, self.rows = version, rows
                view.seen = version

    @staticmethod
    def _fetch_for(tenant: int, status_filter: str) -> tuple[str, list[dict[str, str]]]:
        """The version first, then the rows: the rows are at least as new as the version they are shown with."""
        version = order_views.orders_version(tenant)
        status = None if status_filter == "all" else status_filter
        return version, [{"id": str(o["id"]), "status": o["status"], "revision": str(o["revision"]),
                          "customer": o["customer_ref"], "amount": money(o["amount_cents"], o["currency"]),
                          "updated": when(o["updated_at"])}
                         for o in order_views.list_orders(tenant, status, 200)]


def _row(o: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(f"#{o['id']}", href=f"/orders/{o['id']}", weight="bold",
                              data_testid="order-link")),
        rx.table.cell(o["customer"]),
        rx.table.cell(o["amount"]),
        rx.table.cell(status_badge(o["status"])),
        rx.table.cell(o["revision"]),
        rx.table.cell(rx.text(o["updated"], size="1", color=rx.color("gray", 11))),
        data_testid="order-row",
    )


def orders_page() -> rx.Component:
    return shell(
        "Orders",
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

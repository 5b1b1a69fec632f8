"""The order page's components (its state is `order_detail.OrderState` and its substates): the status card with the
actions the order's state allows, each carrying the revision on screen; the cancel's confirmation; the notifications
table; the history, a page at a time.
"""

from __future__ import annotations

import reflex as rx

from dashboard import paging, routes
from dashboard.components import (
    Row,
    caption,
    card,
    data_table,
    empty_state,
    error_callout,
    icon,
    labelled,
    note_dialog,
    pick,
    shell,
    status_badge,
)
from dashboard.link import action_button
from dashboard.pages import Page
from dashboard.pages.order_detail import OrderHeadState, OrderHistoryState, OrderNotesState, OrderState
from dashboard.state import AuthState


def _history_row(h: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(h["id"]), rx.table.cell(rx.badge(h["what"], variant="soft")),
                        rx.table.cell(h["who"]), rx.table.cell(rx.text(h["at"], size="1")),
                        rx.table.cell(rx.text(h["note"], size="1")), data_testid="history-row")


def _note_row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.vstack(rx.text(n["channel"], weight="medium"), rx.text(n["recipient"], size="1",
                                color=rx.color("gray", 11)), spacing="0")),
        rx.table.cell(rx.badge(n["lane"], variant="outline")),
        rx.table.cell(rx.link(rx.code(n["event_short"], title=n["event_id"], data_testid="notification-event"),
                              href="/audit?q=" + n["event_id"])),
        rx.table.cell(rx.link(rx.code(n["job_id"], data_testid="notification-job"), href="/messages/" + n["id"])),
        rx.table.cell(rx.text("r", n["revision"])),
        rx.table.cell(rx.vstack(
            rx.hstack(status_badge(n["status"], data_testid="notification-status"),
                      caption(n["display_status"], data_testid="notification-state"), spacing="2", align="center"),
            rx.cond(n["reason"] != "", rx.text(n["reason"], size="1", color=rx.color("red", 11))), spacing="1")),
        rx.table.cell(rx.text(n["attempts"], data_testid="notification-attempts")),
        rx.table.cell(rx.code(n["effect"], data_testid="notification-effect")),
        rx.table.cell(rx.text(n["receiver_said"], data_testid="notification-receiver-said")),
        data_testid="notification-row",
    )


def _confirm_cancel() -> rx.Component:
    return note_dialog(
        f"Cancel order #{OrderState.order_id}?",
        "The customer is told their order is cancelled, and it cannot be undone: a cancelled order is never "
        "approved or fulfilled again. Your name, the time and your note are kept in the audit log.",
        open_=OrderState.asking_cancel, on_submit=OrderState.cancel, on_keep=OrderState.close_cancel,
        keep="Keep the order", act="Cancel order", act_colour="red", error=OrderState.cancel_error,
        ids={"summary": "order-cancel-summary", "note": "order-cancel-note", "error": "order-cancel-error",
             "keep": "order-cancel-keep", "act": "order-cancel-confirm", "dialog": "order-cancel-dialog"})


def order_page() -> rx.Component:
    return shell(
        pick(OrderState.found, f"Order #{OrderState.order_id}", "Order not found"),
        rx.cond(
            OrderState.found,
            rx.vstack(
                rx.cond(OrderState.missed != "", rx.callout(
                    rx.hstack(rx.text(OrderState.missed), rx.spacer(),
                              rx.button("Dismiss", size="1", variant="ghost", on_click=OrderState.dismiss_missed)),
                    icon="refresh_cw", color_scheme="amber", data_testid="missed-refresh", width="100%")),
                error_callout(OrderState.error, "command-error"),
                rx.cond(OrderState.notice != "", rx.callout(OrderState.notice, icon="circle_check",
                                                            color_scheme="green", data_testid="command-notice",
                                                            width="100%")),
                rx.cond(OrderHeadState.pushed != "",
                        rx.callout(rx.text("Changed while you watched: ", OrderHeadState.pushed), icon="bell",
                                   color_scheme="blue", width="100%", data_testid="pushed-change")),
                card(
                    rx.flex(
                        labelled("Status", rx.box(status_badge(OrderHeadState.status, size="3"),
                                                  data_testid="order-status", data_status=OrderHeadState.status)),
                        labelled("Revision", rx.heading(OrderHeadState.revision, size="7",
                                                        data_testid="order-revision")),
                        labelled("Customer", rx.text(OrderState.customer, weight="medium",
                                                     data_testid="order-customer")),
                        labelled("Amount", rx.text(OrderState.amount, weight="medium", data_testid="order-amount")),
                        labelled("Updated (UTC)", rx.text(OrderHeadState.updated, size="2")),
                        rx.cond(OrderHeadState.last_change != "", labelled(
                            "Last change (UTC)",
                            rx.text(OrderHeadState.last_change, size="2", data_testid="last-change"))),
                        rx.spacer(),
                        rx.cond(~OrderState.may_change, rx.badge("read-only (support)", variant="soft",
                                                                  color_scheme="gray", data_testid="read-only")),
                        rx.cond(OrderState.may_change, rx.flex(
                            # Each action carries the revision on screen: the server acts only on the order the
                            # operator saw (a push or a reconnect may have moved it since).
                            rx.cond(OrderHeadState.can_approve, action_button(
                                icon("check", size=16), "Approve", on_click=OrderState.approve(OrderHeadState.revision),
                                loading=OrderState.busy, data_testid="approve", color_scheme="green")),
                            rx.cond(OrderHeadState.can_fulfill, action_button(
                                icon("truck", size=16), "Mark fulfilled",
                                on_click=OrderState.fulfill(OrderHeadState.revision),
                                loading=OrderState.busy, data_testid="fulfill", color_scheme="blue")),
                            rx.cond(OrderHeadState.can_cancel, action_button(
                                icon("x", size=16), "Cancel order",
                                on_click=OrderState.ask_cancel(OrderHeadState.revision), loading=OrderState.busy,
                                data_testid="cancel", color_scheme="red", variant="soft")),
                            gap="8px", wrap="wrap", data_testid="order-actions",
                        )),
                        gap="24px", wrap="wrap", align="center", width="100%",
                    ),
                ),
                rx.cond(OrderHeadState.cancelled_by != "", rx.callout(
                    OrderHeadState.cancelled_by, icon="ban", color_scheme="gray", width="100%",
                    data_testid="order-cancelled-by")),
                _confirm_cancel(),
                rx.heading("Notifications", size="4", margin_top="8px"),
                rx.text("Every message this order owes: written in the same transaction as the revision, "
                        "delivered at least once, applied once by the receiver.", size="2",
                        color=rx.color("gray", 11)),
                data_table(["Channel", "Lane", "Event", "Job", "Rev", "Status", "Attempts", "Effect",
                            "Receiver said"], OrderNotesState.notifications, _note_row,
                           "No notifications yet: approving this order creates them.", "notifications"),
                rx.heading("History", size="4", margin_top="8px"),
                rx.text("Every change of this order, newest first: who made it, when, and the note it was given.",
                        size="2", color=rx.color("gray", 11)),
                rx.cond(OrderHistoryState.has_older | OrderHistoryState.has_newer,
                        paging.pager(OrderState.history_older, OrderState.history_newer, OrderHistoryState.has_older,
                                     OrderHistoryState.has_newer, "history-pager")),
                data_table(["Rev", "What", "Who", "When (UTC)", "Note"], OrderHistoryState.rows, _history_row,
                           "No change yet: the order is as it entered the system.", "order-history"),
                spacing="3", width="100%",
            ),
            empty_state("No such order for your tenant."),
        ),
        actions=rx.link(rx.button("All orders", variant="soft", size="2"), href=routes.ORDERS),
    )


PAGE = Page(routes.ORDER_DETAIL, order_page, "Order · Outbox", [AuthState.require_login, OrderState.load])

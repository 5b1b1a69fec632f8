"""Ops (on-call) page: the verdict banner, per-lane state and figures against the SLO, failures with Replay/Resolve,
charts over 1 h / 24 h / 7 d, privileged actions, and receiver fault switches in development mode."""

from __future__ import annotations

from typing import Any

import reflex as rx

from dashboard import routes
from dashboard.components import (
    ACTION_HEADERS,
    Row,
    action_table_row,
    caption,
    card,
    data_table,
    icon,
    lookup,
    note_dialog,
    pick,
    secondary,
    shell,
    stat,
    status_badge,
)
from dashboard.link import action_button
from dashboard.pages import Page
from dashboard.pages.ops_state import BULK_SINCE, OpsState
from dashboard.state import AuthState
from domain import faults
from domain.delivery.queue import LANES
from domain.delivery.views import SERIES_WINDOWS

__all__ = ["PAGE", "OpsState"]


def _lane_row(x: Row) -> rx.Component:
    paused = x["paused"] == "yes"
    return rx.table.row(
        rx.table.cell(rx.text(x["lane"], weight="bold")),
        # The state and its control come first: on a phone they stay on screen while the figures scroll.
        rx.table.cell(rx.hstack(
            rx.badge(pick(paused, "PAUSED", "running"), variant=pick(paused, "solid", "soft"),
                     color_scheme=pick(paused, "red", "gray"), data_testid="lane-state"),
            rx.cond(OpsState.platform, action_button(
                pick(paused, "Resume", "Pause"), size="1", variant="soft", color_scheme=pick(paused, "green", "amber"),
                on_click=OpsState.ask(pick(paused, "resume", "pause"), x["lane"]), data_testid="lane-toggle")),
            spacing="2", align="center")),
        rx.table.cell(rx.text(x["depth"], data_testid="lane-depth")),
        rx.table.cell(rx.badge(x["oldest"], color_scheme=pick(x["breach"] == "yes", "red", "green"),
                               data_testid="lane-oldest")),
        rx.table.cell(rx.text(x["scheduled"], data_testid="lane-scheduled")),
        rx.table.cell(rx.text(x["next_due"], size="1")),
        rx.table.cell(x["attempts"]), rx.table.cell(x["failed"]), rx.table.cell(x["review"]),
        rx.table.cell(x["p50"]), rx.table.cell(x["p99"]),
        data_testid="lane-row",
    )


def _review_row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.hstack(
            rx.cond(OpsState.may_replay, rx.checkbox(checked=OpsState.selected.contains(n["id"]),
                                                     on_change=lambda on: OpsState.tick(n["id"], on),
                                                     data_testid="review-tick")),
            rx.link(rx.text("#", n["id"]), href="/messages/" + n["id"]), spacing="2", align="center")),
        rx.table.cell(rx.cond(OpsState.may_replay, rx.hstack(
            action_button("Replay", size="1", on_click=OpsState.ask("replay", n["id"]), data_testid="replay"),
            action_button("Resolve", size="1", variant="soft", color_scheme="gray",
                      on_click=OpsState.ask("resolve", n["id"]), data_testid="resolve"), spacing="2"),
            rx.text("read-only", size="1", color=rx.color("gray", 10)))),
        rx.table.cell(n["tenant"]),
        rx.table.cell(n["channel"]),
        rx.table.cell(n["recipient"]),
        rx.table.cell(status_badge(n["status"])),
        rx.table.cell(rx.text(n["reason"], size="1")),
        rx.table.cell(n["attempts"]),
        rx.table.cell(rx.link(rx.code(n["event_short"]), href=f"/audit?q={n['event_id']}")),
    )


def _bulk_bar() -> rx.Component:
    """Bulk review: the rows ticked, or every failed row of a lane since a time — each confirmed with a note."""
    return rx.flex(
        rx.hstack(
            rx.checkbox("all", checked=(OpsState.selected.length() > 0)
                        & (OpsState.selected.length() == OpsState.review.length()),
                        on_change=OpsState.tick_all, data_testid="review-tick-all"),
            action_button(rx.text("Replay selected (", OpsState.selected.length(), ")"), size="1",
                      on_click=OpsState.ask("replay_selected", ""), disabled=OpsState.selected.length() == 0,
                      data_testid="replay-selected"),
            action_button(rx.text("Resolve selected (", OpsState.selected.length(), ")"), size="1", variant="soft",
                      color_scheme="gray", on_click=OpsState.ask("resolve_selected", ""),
                      disabled=OpsState.selected.length() == 0, data_testid="resolve-selected"),
            spacing="2", align="center", wrap="wrap"),
        rx.hstack(
            rx.text("Every failed row on lane", size="2"),
            rx.select(list(LANES), value=OpsState.bulk_lane, on_change=lambda v: OpsState.set_bulk("lane", v),
                      size="1", data_testid="bulk-lane"),
            rx.text("in the last", size="2"),
            rx.select(list(BULK_SINCE), value=OpsState.bulk_since,
                      on_change=lambda v: OpsState.set_bulk("since", v), size="1", data_testid="bulk-since"),
            action_button("Replay all", size="1", on_click=OpsState.ask("replay_lane", ""), data_testid="replay-lane"),
            action_button("Resolve all", size="1", variant="soft", color_scheme="gray",
                      on_click=OpsState.ask("resolve_lane", ""), data_testid="resolve-lane"),
            spacing="2", align="center", wrap="wrap"),
        gap="12px", wrap="wrap", justify="between", width="100%", margin_bottom="8px",
    )


def _chart(title: str, testid: str, lines: list[tuple[str, str, str]], ticks: Any, top: Any, unit: str,
           slo: bool = False) -> rx.Component:
    """One chart of the window's points, each the worst of its span: a line per (key, legend name, colour), the SLO
    as a dashed red line of its own (in the legend too), round ticks from 0 (OpsState.ticks_*)."""
    drawn = [rx.recharts.line(data_key=key, name=name, stroke=colour, stroke_width=2, dot=False, type_="monotone",
                              is_animation_active=False) for key, name, colour in lines]
    if slo:
        drawn.append(rx.recharts.line(data_key="slo", name=OpsState.slo_label, stroke="#e5484d", stroke_width=1.5,
                                      stroke_dasharray="6 4", dot=False, is_animation_active=False,
                                      class_name="slo-line"))
    return card(
        rx.text(title, size="2", weight="medium"),
        rx.recharts.line_chart(
            *drawn,
            rx.recharts.x_axis(data_key="minute", min_tick_gap=30, font_size=11),
            # Wide enough for "100000 s": a narrower axis clipped the leading digits (22000 read as 2000).
            rx.recharts.y_axis(unit=unit, width=84, font_size=11, allow_decimals=False, ticks=ticks,
                               domain=[0, top], interval=0),
            rx.recharts.cartesian_grid(stroke_dasharray="3 3"),
            rx.recharts.graphing_tooltip(),
            rx.recharts.legend(vertical_align="top", height=28, icon_size=10),
            data=OpsState.series, height=200, width="100%",
        ),
        flex="1", min_width="280px", data_testid=f"chart-{testid}",
    )


def _charts() -> rx.Component:
    return rx.flex(
        _chart("Owed depth (most at once)", "depth", [("depth", "most owed at once", "#3e63dd")],
               OpsState.ticks_depth, OpsState.top_depth, ""),
        _chart("Oldest owed age (oldest in each point)", "oldest",
               [("oldest", "oldest owed", "#ffb224")], OpsState.ticks_oldest, OpsState.top_oldest, " s", slo=True),
        _chart("Commit-to-send latency", "latency",
               [("latency_max", "slowest", "#30a46c"), ("latency_mean", "mean", "#8e4ec6")], OpsState.ticks_latency,
               OpsState.top_latency, " s", slo=True),
        _chart("Sent (messages in each point)", "sent", [("sent", "sent", "#12a594")], OpsState.ticks_sent,
               OpsState.top_sent, ""),
        gap="12px", wrap="wrap", width="100%", margin_y="12px")


BANNER_ICON: dict[str, str] = {"green": "circle_check", "amber": "triangle_alert", "red": "octagon_alert"}


def _banner() -> rx.Component:
    return rx.callout(
        rx.hstack(rx.text(OpsState.banner, weight="medium"), rx.spacer(),
                  caption(OpsState.updated, data_testid="ops-updated"),
                  width="100%", wrap="wrap", align="center"),
        icon="activity", color_scheme=lookup(OpsState.banner_level, {"red": "red", "amber": "amber"}, "green"),
        variant="surface", width="100%", margin_bottom="12px", data_testid="ops-banner",
        data_level=OpsState.banner_level,
    )


def _confirm_dialog() -> rx.Component:
    return note_dialog(
        OpsState.confirm_title, "This is kept with your name and the time. Say why:",
        open_=OpsState.confirm_action != "", on_submit=OpsState.confirm, on_keep=OpsState.close_confirm,
        keep="Cancel", act="Confirm", error=OpsState.confirm_error, max_width="460px", focus_note=True,
        placeholder="e.g. receiver fixed their 422, see ticket 123",
        ids={"note": "confirm-note", "error": "confirm-error", "keep": "confirm-cancel", "act": "confirm-ok",
             "dialog": "confirm-dialog"})


def _fault_switches() -> rx.Component:
    return (
        rx.cond(OpsState.dev_mode & OpsState.platform, rx.box(
            rx.heading("Receiver fault switches (development only)", size="4", margin_top="20px",
                       margin_bottom="8px"),
            rx.hstack(*[action_button(name, size="1", variant="outline", color_scheme="red",
                                  on_click=OpsState.fault(name)) for name in faults.RECEIVER_SWITCHES],
                      wrap="wrap", spacing="2"),
            rx.heading("Worker crash after the remote effect (the dangerous window)", size="3", margin_top="12px",
                       margin_bottom="8px"),
            rx.hstack(*[action_button(f"crash next {lane} worker", size="1", variant="soft", color_scheme="red",
                                  on_click=OpsState.arm_worker_crash(lane), data_testid=f"arm-crash-{lane}")
                        for lane in ("high", "normal")], wrap="wrap", spacing="2"),
        ))
    )


def _cdc_card() -> rx.Component:
    """With OUTBOX_CDC on (platform on-call): how far the fulfilment projection is behind the CDC stream."""
    return rx.cond(OpsState.cdc_on, card(
        rx.heading("CDC stream", size="3"),
        rx.text(OpsState.cdc_state, size="2", data_testid="cdc-state"),
        rx.flex(
            stat("Events behind", OpsState.cdc_behind, "cdc-behind"),
            stat("Pending (delivered, not acknowledged)", OpsState.cdc_pending, "cdc-pending"),
            stat("Oldest unconsumed", OpsState.cdc_oldest, "cdc-oldest"),
            stat("WAL the slot keeps", OpsState.cdc_retained, "cdc-retained"),
            gap="12px", wrap="wrap", width="100%"),
        margin_bottom="16px", data_testid="cdc-card"))


def ops_page() -> rx.Component:
    return shell(
        "Operations",
        _banner(),
        _confirm_dialog(),
        rx.cond(OpsState.message != "", rx.callout(OpsState.message, icon="info", width="100%",
                                                    margin_bottom="12px", data_testid="ops-message")),
        rx.flex(
            stat("Oldest-due SLO", OpsState.slo),
            stat("Bulk lane pace (OUTBOX_BULK_RATE)", OpsState.bulk_rate, "bulk-rate"),
            stat("Refresh pushes (1 h)", OpsState.pushes, "refresh-count"),
            stat("Push latency p50", OpsState.push_p50),
            stat("Push latency p99", OpsState.push_p99),
            gap="12px", wrap="wrap", width="100%", margin_bottom="16px",
        ),
        _cdc_card(),
        caption("Due work only: a message scheduled for later is counted under Scheduled, never as late.",
                margin_bottom="6px"),
        data_table(["Lane", "State", "Due", "Oldest due", "Scheduled", "Next due (UTC)", "Attempts", "Failed",
                    "Review", "p50", "p99"],
                   OpsState.lanes, _lane_row, "No lanes.", "lanes-table"),
        rx.hstack(rx.text("Charts over", size="2"),
                  rx.segmented_control.root(*[rx.segmented_control.item(w, value=w) for w in SERIES_WINDOWS],
                                            value=OpsState.window, on_change=OpsState.set_window, size="1",
                                            data_testid="chart-window"),
                  align="center", spacing="2", margin_top="16px"),
        caption("Each point is the worst of its span (a 24 h point covers 15 minutes, a 7 d point 2 hours): the most "
                "messages owed at once and the oldest owed age at its oldest, so a short breach is never averaged "
                "away; sent is the count in the span."),
        _charts(),
        rx.heading("Failed and in review", size="4", margin_bottom="8px"),
        secondary("Replay re-queues the same row with the same event id — the receiver recognises it, so a "
                  "replay can never double an effect. Resolve records that a human settled it outside the system.",
                  margin_bottom="8px"),
        rx.cond(OpsState.may_replay, _bulk_bar()),
        data_table(["#", "", "Tenant", "Channel", "Recipient", "Status", "Why", "Attempts", "Event"],
                   OpsState.review, _review_row, "Nothing failed. Nothing waits for a human.", "review-table"),
        rx.heading("Privileged actions", size="4", margin_top="16px", margin_bottom="8px"),
        data_table(ACTION_HEADERS, OpsState.actions, action_table_row,
                   "No privileged actions yet.", "actions-table"),
        _fault_switches(),
        actions=rx.button(icon("refresh_cw", size=14), "Refresh", on_click=OpsState.load, variant="soft",
                          size="2", data_testid="ops-refresh"),
    )


PAGE = Page(routes.OPS, ops_page, "Operations · Outbox", [AuthState.require_login, OpsState.load],
            ("Ops", "activity"))

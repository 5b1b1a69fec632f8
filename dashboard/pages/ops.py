"""Ops (on-call): per-lane depth and oldest owed age against the SLO, failures with Replay/Resolve, pause/resume,
refresh counts and push latency, charts over the last hour, and receiver fault switches in development mode."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx

from dashboard import live, routes
from dashboard.components import (
    ACTION_HEADERS,
    Row,
    action_row,
    action_table_row,
    card,
    data_table,
    icon,
    pick,
    shell,
    stat,
    status_badge,
)
from dashboard.events import Followup, event
from dashboard.format import notification, parse_id, when
from dashboard.pages import Page
from dashboard.state import AuthState
from domain import faults
from domain.access import actions as operator_actions
from domain.access import roles
from domain.access.roles import Act, refusal
from domain.delivery import lanes as lane_controls
from domain.delivery import review as review_actions
from domain.delivery import views as delivery_views
from domain.delivery.queue import LANES
from domain.settings import get_settings

REFRESH_SECONDS = 5.0


async def _snapshot(tenant_id: int | None) -> dict[str, Any]:
    """One tenant's view, or every tenant's (tenant_id None: platform on-call)."""
    s = get_settings()
    stats, review, series, refresh, done = await asyncio.gather(
        asyncio.to_thread(delivery_views.lane_stats, tenant_id), asyncio.to_thread(delivery_views.review_items, tenant_id),
        asyncio.to_thread(delivery_views.ops_series, tenant_id, 60), asyncio.to_thread(delivery_views.refresh_stats, tenant_id),
        asyncio.to_thread(operator_actions.recent, tenant_id, 20))
    return {
        "slo": f"{s.oldest_owed_slo_seconds:.0f}s",
        "bulk_rate": f"{s.bulk_rate_per_second:.0f}/s per channel",
        "dev_mode": bool(s.dev_mode),
        "lanes": [{
            "lane": x["lane"], "depth": str(x["depth"]), "oldest": f"{x['oldest_owed_seconds']:.1f}s",
            "breach": "yes" if x["oldest_owed_seconds"] > s.oldest_owed_slo_seconds else "no",
            "scheduled": str(x["scheduled"]),
            "next_due": when(x["next_due"]) if x["next_due"] else "—",
            "attempts": str(x["attempts"]), "failed": str(x["failed"]), "review": str(x["review"]),
            "p50": f"{x['p50_ms']:.0f} ms", "p99": f"{x['p99_ms']:.0f} ms",
            "paused": "yes" if x["paused"] else "no",
        } for x in stats],
        "review": [notification(n) for n in review],
        "actions": [action_row(a) for a in done],
        "series": [{"minute": r["minute"], "depth": int(r["depth"]), "oldest": round(float(r["oldest_seconds"]), 1),
                    "latency": round(float(r["latency_ms"]), 1)} for r in series],
        "pushes": str(refresh["pushes"]),
        "push_p50": f"{refresh['p50_ms']:.0f} ms" if refresh["pushes"] else "—",
        "push_p99": f"{refresh['p99_ms']:.0f} ms" if refresh["pushes"] else "—",
    }


class OpsState(AuthState):
    lanes: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    review: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    actions: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    series: rx.Field[list[dict[str, Any]]] = rx.field(default_factory=list)
    pushes: rx.Field[str] = rx.field("0")
    push_p50: rx.Field[str] = rx.field("—")
    push_p99: rx.Field[str] = rx.field("—")
    slo: rx.Field[str] = rx.field("")
    bulk_rate: rx.Field[str] = rx.field("")
    dev_mode: rx.Field[bool] = rx.field(False)
    message: rx.Field[str] = rx.field("")

    @event
    async def load(self) -> Followup:
        if not self._operator_id:
            return None
        for k, v in (await _snapshot(self._scope())).items():
            setattr(self, k, v)
        return OpsState.follow

    @event(background=True)
    async def follow(self) -> None:
        """On-call leaves this page open: refresh every few seconds, reading outside the state lock."""
        still_wanted = live.take_over_watch(self.router.session.client_token)
        async with self:
            scope, session = self._scope(), self._session()
        if not session[1]:
            return
        while still_wanted():
            await asyncio.sleep(REFRESH_SECONDS)
            if not still_wanted():
                return
            snap = await _snapshot(scope)
            async with self:
                if self._session() != session:
                    return
                for k, v in snap.items():
                    setattr(self, k, v)

    def _scope(self) -> int | None:
        """The tenant whose rows this operator acts on; None = every tenant (platform on-call)."""
        return self._tenant_id if roles.has_tenant(self._role) else None

    @event
    async def toggle_lane(self, lane: str, paused: str) -> Followup:
        if lane not in LANES or not await self._allowed(Act.PAUSE):  # a lane carries every tenant's messages
            self.message = refusal(Act.PAUSE)
            return None
        await asyncio.to_thread(lambda: lane_controls.set_lane_paused(lane, paused != "yes", actor_ref=self._actor_ref))
        self.message = f"Lane {lane} {'resumed' if paused == 'yes' else 'paused'}."
        return OpsState.load

    @event
    async def replay(self, nid: str) -> Followup:
        if parse_id(nid) is None:
            return None
        if not await self._allowed(Act.REPLAY):
            self.message = refusal(Act.REPLAY)
            return None
        scope, actor = self._scope(), self._actor_ref
        ok = await asyncio.to_thread(lambda: review_actions.replay(scope, int(nid), actor_ref=actor))
        self.message = f"#{nid} queued again with the same event id." if ok else f"#{nid} is no longer FAILED."
        return OpsState.load

    @event
    async def resolve(self, nid: str) -> Followup:
        if parse_id(nid) is None:
            return None
        if not await self._allowed(Act.RESOLVE):
            self.message = refusal(Act.RESOLVE)
            return None
        scope, actor = self._scope(), self._actor_ref
        ok = await asyncio.to_thread(lambda: review_actions.resolve(scope, int(nid), actor_ref=actor))
        self.message = f"#{nid} marked resolved by hand." if ok else f"#{nid} could not be resolved."
        return OpsState.load

    @event
    async def arm_worker_crash(self, lane: str) -> None:
        if not faults.may_arm_crash(lane) or not await self._allowed(Act.FAULTS):
            self.message = refusal(Act.FAULTS)
            return
        await faults.arm_worker_crash(await live.arq(), lane)
        self.message = (f"Armed: the next {lane} worker to get an accepted response dies before recording it. "
                        "`outbox up` restarts it; the retry must find the effect already applied.")

    @event
    async def fault(self, name: str) -> None:
        if not faults.may_switch_receiver(name) or not await self._allowed(Act.FAULTS):
            self.message = refusal(Act.FAULTS)
            return
        answered = await faults.set_receiver_switch(name)
        self.message = f"Receiver fault set: {name}." if answered else "The receiver did not answer."


def _lane_row(x: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.text(x["lane"], weight="bold")),
        rx.table.cell(rx.text(x["depth"], data_testid="lane-depth")),
        rx.table.cell(rx.badge(x["oldest"], color_scheme=pick(x["breach"] == "yes", "red", "green"),
                               data_testid="lane-oldest")),
        rx.table.cell(rx.text(x["scheduled"], data_testid="lane-scheduled")),
        rx.table.cell(rx.text(x["next_due"], size="1")),
        rx.table.cell(x["attempts"]),
        rx.table.cell(x["failed"]),
        rx.table.cell(x["review"]),
        rx.table.cell(x["p50"]),
        rx.table.cell(x["p99"]),
        rx.table.cell(rx.cond(
            OpsState.platform,
            rx.button(pick(x["paused"] == "yes", "Resume", "Pause"), size="1",
                      color_scheme=pick(x["paused"] == "yes", "green", "amber"), variant="soft",
                      on_click=OpsState.toggle_lane(x["lane"], x["paused"]), data_testid="lane-toggle"),
            rx.badge(pick(x["paused"] == "yes", "paused", "running"), variant="soft",
                     color_scheme=pick(x["paused"] == "yes", "amber", "green")))),
        data_testid="lane-row",
    )


def _review_row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(rx.text("#", n["id"]), href="/messages/" + n["id"])),
        rx.table.cell(n["tenant"]),
        rx.table.cell(n["channel"]),
        rx.table.cell(n["recipient"]),
        rx.table.cell(status_badge(n["status"])),
        rx.table.cell(rx.text(n["reason"], size="1")),
        rx.table.cell(n["attempts"]),
        rx.table.cell(rx.link(rx.code(n["event_short"]), href=f"/audit?q={n['event_id']}")),
        rx.table.cell(rx.cond(OpsState.may_replay, rx.hstack(
            rx.button("Replay", size="1", on_click=OpsState.replay(n["id"]), data_testid="replay"),
            rx.button("Resolve", size="1", variant="soft", color_scheme="gray", on_click=OpsState.resolve(n["id"]),
                      data_testid="resolve"), spacing="2"), rx.text("read-only", size="1", color=rx.color("gray", 10)))),
    )


def _chart(title: str, key: str, colour: str, unit: str) -> rx.Component:
    return card(
        rx.text(title, size="2", weight="medium"),
        rx.recharts.line_chart(
            rx.recharts.line(data_key=key, stroke=colour, stroke_width=2, dot=False, type_="monotone",
                             is_animation_active=False),
            rx.recharts.x_axis(data_key="minute", min_tick_gap=30, font_size=11),
            rx.recharts.y_axis(unit=unit, width=70, font_size=11),
            rx.recharts.cartesian_grid(stroke_dasharray="3 3"),
            rx.recharts.graphing_tooltip(),
            data=OpsState.series, height=180, width="100%",
        ),
        flex="1", min_width="280px",
    )


def ops_page() -> rx.Component:
    return shell(
        "Operations",
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
        rx.text("Due work only: a message scheduled for later is counted under Scheduled, never as late.",
                size="1", color=rx.color("gray", 11), margin_bottom="6px"),
        data_table(["Lane", "Due", "Oldest due", "Scheduled", "Next due (UTC)", "Attempts", "Failed", "Review",
                    "p50", "p99", ""],
                   OpsState.lanes, _lane_row, "No lanes.", "lanes-table"),
        rx.flex(_chart("Owed depth", "depth", "#3e63dd", ""), _chart("Oldest owed age", "oldest", "#ffb224", "s"),
                _chart("Commit-to-send latency", "latency", "#30a46c", "ms"),
                gap="12px", wrap="wrap", width="100%", margin_y="16px"),
        rx.heading("Failed and in review", size="4", margin_bottom="8px"),
        rx.text("Replay re-queues the same row with the same event id — the receiver recognises it, so a replay "
                "can never double an effect. Resolve records that a human settled it outside the system.",
                size="2", color=rx.color("gray", 11), margin_bottom="8px"),
        data_table(["#", "Tenant", "Channel", "Recipient", "Status", "Why", "Attempts", "Event", ""], OpsState.review,
                   _review_row, "Nothing failed. Nothing waits for a human.", "review-table"),
        rx.heading("Privileged actions", size="4", margin_top="16px", margin_bottom="8px"),
        data_table(ACTION_HEADERS, OpsState.actions, action_table_row,
                   "No privileged actions yet.", "actions-table"),
        rx.cond(OpsState.dev_mode & OpsState.platform, rx.box(
            rx.heading("Receiver fault switches (development only)", size="4", margin_top="20px",
                       margin_bottom="8px"),
            rx.hstack(*[rx.button(name, size="1", variant="outline", color_scheme="red",
                                  on_click=OpsState.fault(name)) for name in faults.RECEIVER_SWITCHES], wrap="wrap", spacing="2"),
            rx.heading("Worker crash after the remote effect (the dangerous window)", size="3", margin_top="12px",
                       margin_bottom="8px"),
            rx.hstack(*[rx.button(f"crash next {lane} worker", size="1", variant="soft", color_scheme="red",
                                  on_click=OpsState.arm_worker_crash(lane), data_testid=f"arm-crash-{lane}")
                        for lane in ("high", "normal")], wrap="wrap", spacing="2"),
        )),
        actions=rx.button(icon("refresh_cw", size=14), "Refresh", on_click=OpsState.load, variant="soft",
                          size="2", data_testid="ops-refresh"),
    )


PAGE = Page(routes.OPS, ops_page, "Operations · Outbox", [AuthState.require_login, OpsState.load],
            ("Ops", "activity"))

"""Ops (on-call) state: lane figures, failures, charts over a chosen window, the page's verdict, and the three
privileged actions (pause/resume, replay, resolve), each confirmed with a note that is kept with who did it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import reflex as rx

from dashboard import live
from dashboard.events import Followup, event
from dashboard.format import ago, parse_id
from dashboard.live_task import LiveTask
from dashboard.pages.ops_snapshot import snapshot
from dashboard.state import AuthState
from domain import faults
from domain.access import roles
from domain.access.roles import Act, refusal
from domain.delivery import lanes as lane_controls
from domain.delivery import review as review_actions
from domain.delivery.queue import LANES
from domain.delivery.views import SERIES_WINDOWS

REFRESH_SECONDS = 5.0
# What each confirmation is: (the verb its title starts with, who may).
CONFIRM = {"pause": ("Pause lane", Act.PAUSE), "resume": ("Resume lane", Act.PAUSE),
           "replay": ("Replay message", Act.REPLAY), "resolve": ("Resolve message by hand", Act.RESOLVE),
           "replay_selected": ("Replay", Act.REPLAY), "resolve_selected": ("Resolve by hand", Act.RESOLVE),
           "replay_lane": ("Replay", Act.REPLAY), "resolve_lane": ("Resolve by hand", Act.RESOLVE)}
# "Every failed row on lane X since T": T is one of these windows back from the moment the confirmation opens.
BULK_SINCE = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "6h": timedelta(hours=6),
              "24h": timedelta(hours=24), "7d": timedelta(days=7)}


class OpsState(AuthState):
    lanes: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    review: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    actions: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    series: rx.Field[list[dict[str, Any]]] = rx.field(default_factory=list)
    pushes: rx.Field[str] = rx.field("0")
    push_p50: rx.Field[str] = rx.field("—")
    push_p99: rx.Field[str] = rx.field("—")
    # The "CDC stream" card (cdc_on False: OUTBOX_CDC off, or not platform on-call).
    cdc_on: rx.Field[bool] = rx.field(False)
    cdc_state: rx.Field[str] = rx.field("")
    cdc_behind: rx.Field[str] = rx.field("—")
    cdc_pending: rx.Field[str] = rx.field("—")
    cdc_oldest: rx.Field[str] = rx.field("—")
    cdc_retained: rx.Field[str] = rx.field("—")
    slo: rx.Field[str] = rx.field("")
    slo_label: rx.Field[str] = rx.field("SLO")
    ticks_depth: rx.Field[list[int]] = rx.field(default_factory=lambda: [0, 1])
    ticks_sent: rx.Field[list[int]] = rx.field(default_factory=lambda: [0, 1])
    ticks_oldest: rx.Field[list[int]] = rx.field(default_factory=lambda: [0, 1])
    ticks_latency: rx.Field[list[int]] = rx.field(default_factory=lambda: [0, 1])
    top_depth: rx.Field[int] = rx.field(1)
    top_sent: rx.Field[int] = rx.field(1)
    top_oldest: rx.Field[int] = rx.field(1)
    top_latency: rx.Field[int] = rx.field(1)
    bulk_rate: rx.Field[str] = rx.field("")
    dev_mode: rx.Field[bool] = rx.field(False)
    message: rx.Field[str] = rx.field("")
    window: rx.Field[str] = rx.field("1h")
    banner: rx.Field[str] = rx.field("")
    banner_level: rx.Field[str] = rx.field("green")
    updated: rx.Field[str] = rx.field("")  # "updated N s ago", ticked every second by `follow`
    _loaded_at: float = 0.0
    # The confirmation dialog: which action on what, and the note kept with it.
    confirm_action: rx.Field[str] = rx.field("")
    confirm_target: rx.Field[str] = rx.field("")
    confirm_title: rx.Field[str] = rx.field("")
    confirm_error: rx.Field[str] = rx.field("")
    # Bulk review: the rows ticked, and the lane-wide choice (lane, since how long).
    selected: rx.Field[list[str]] = rx.field(default_factory=list)
    bulk_lane: rx.Field[str] = rx.field("normal")
    bulk_since: rx.Field[str] = rx.field("24h")
    _bulk_ids: list[int] = []  # backend-only: the rows the open confirmation acts on, fixed when it opened
    _bulk_from: str = ""  # backend-only: the lane-wide confirmation's T (ISO, UTC), fixed when it opened

    def _show(self, snap: dict[str, Any]) -> None:
        for k, v in snap.items():
            setattr(self, k, v)
        self._loaded_at = time.monotonic()
        self.updated = ago(0)
        shown = {n["id"] for n in self.review}
        self.selected = [i for i in self.selected if i in shown]  # a row gone from the list is no longer ticked

    @event
    async def load(self) -> Followup:
        if not self._operator_id:
            return None
        self._show(await snapshot(self._scope(), self.window))
        return OpsState.follow

    @event
    async def set_window(self, window: str | list[str]) -> None:
        """The charts' window (the segmented control sends one value, typed as "one or several" by Radix)."""
        window = window if isinstance(window, str) else next(iter(window), "")
        if window not in SERIES_WINDOWS or not await self._fresh() or not self._operator_id:
            return  # a session ended elsewhere reads nothing (the tab still holds its tenant)
        self.window = window
        self._show(await snapshot(self._scope(), window))

    @event
    async def ask(self, action: str, target: str) -> None:
        """Open the confirmation for an action; nothing happens until it is confirmed with a note. A bulk action
        fixes what it acts on now: the rows ticked, or the lane and the time T (its count is shown)."""
        if not self._operator_id or action not in CONFIRM:
            return  # the role is asked when it is confirmed (`confirm`), where the action happens
        self.confirm_error = ""
        verb = CONFIRM[action][0]
        if action.endswith("_selected"):
            self._bulk_ids = sorted({i for i in map(parse_id, self.selected) if i is not None})
            if not self._bulk_ids:
                self.message = "Tick the rows first."
                return
            self.confirm_title = f"{verb} {len(self._bulk_ids)} selected message(s): " + ", ".join(
                f"#{i}" for i in self._bulk_ids[:20]) + (" …" if len(self._bulk_ids) > 20 else "")
        elif action.endswith("_lane"):
            if self.bulk_lane not in LANES or self.bulk_since not in BULK_SINCE:
                return
            since = datetime.now(UTC) - BULK_SINCE[self.bulk_since]
            scope, lane = self._scope(), self.bulk_lane
            n = await asyncio.to_thread(review_actions.count_lane, scope, lane, since)
            self._bulk_from, target = since.isoformat(), lane
            at_most = f" (at most {review_actions.BULK_MAX} a pass)" if n > review_actions.BULK_MAX else ""
            self.confirm_title = (f"{verb} every failed row on lane {lane} since {since:%Y-%m-%d %H:%M} UTC: {n} "
                                  f"message(s){at_most}")
        else:
            what = f"lane {target}" if action in ("pause", "resume") else f"#{target}"
            self.confirm_title = f"{verb} {what}"
        self.confirm_action, self.confirm_target = action, target

    @event
    def tick(self, nid: str, on: bool) -> None:
        """A review row ticked or unticked for a bulk action."""
        if parse_id(nid) is None:
            return
        self.selected = [i for i in self.selected if i != nid] + ([nid] if on else [])

    @event
    def tick_all(self, on: bool) -> None:
        self.selected = [n["id"] for n in self.review] if on else []

    @event
    def set_bulk(self, name: str, value: str) -> None:
        if name == "lane" and value in LANES:
            self.bulk_lane = value
        elif name == "since" and value in BULK_SINCE:
            self.bulk_since = value

    @event
    def close_confirm(self) -> None:
        self.confirm_action = ""

    @event
    async def confirm(self, form: dict[str, str]) -> Followup:
        note, action, target = str(form.get("note", "")).strip()[:500], self.confirm_action, self.confirm_target
        if not note:
            self.confirm_error = "Say why: the note is kept with your name."
            return None
        self.confirm_action = ""
        if action in ("pause", "resume"):
            return await self._toggle(target, "no" if action == "pause" else "yes", note)
        if action in ("replay", "resolve"):
            return await self._review(action, target, note)
        if action in CONFIRM:
            return await self._bulk(action, target, note)
        return None

    @event(background=True)
    async def follow(self) -> None:
        """On-call leaves this page open: refresh every few seconds, reading outside the state lock."""
        task, scope = await LiveTask.start_reading(self, self._scope)
        if not task.operator:
            return
        while await task.wait(1.0):  # "updated N s ago" ticks; the data reloads every REFRESH_SECONDS
            async with self:
                if not task.still_mine():
                    return
                self.updated = ago(time.monotonic() - self._loaded_at)
                due, window = time.monotonic() - self._loaded_at >= REFRESH_SECONDS, self.window
            if due:
                snap = await task.read(snapshot(scope, window))
                async with self:
                    if not task.still_mine():
                        return
                    self._show(snap)

    def _scope(self) -> int | None:
        """The tenant whose rows this operator acts on; None = every tenant (platform on-call)."""
        return self._tenant_id if roles.has_tenant(self._role) else None

    # The privileged actions: reached only through `confirm` (a note is required there), and each asks `_allowed`
    # itself. No handler does them without the note: the browser can call any handler, so a one-click door would be
    # a way around the confirmation.
    async def _toggle(self, lane: str, paused: str, note: str) -> Followup:
        if lane not in LANES or not await self._allowed(Act.PAUSE):  # a lane carries every tenant's messages
            self.message = refusal(Act.PAUSE)
            return None
        actor = self._actor_ref
        await asyncio.to_thread(lambda: lane_controls.set_lane_paused(lane, paused != "yes", actor_ref=actor,
                                                                      note=note))
        self.message = f"Lane {lane} {'resumed' if paused == 'yes' else 'paused'}."
        return OpsState.load

    async def _review(self, kind: str, nid: str, note: str) -> Followup:
        """One failed message replayed (`kind` "replay") or resolved by hand ("resolve")."""
        if parse_id(nid) is None:
            return None
        act = Act.REPLAY if kind == "replay" else Act.RESOLVE
        if not await self._allowed(act):
            self.message = refusal(act)
            return None
        scope, actor = self._scope(), self._actor_ref
        if kind == "replay":
            ok = await asyncio.to_thread(lambda: review_actions.replay(scope, int(nid), actor_ref=actor, note=note))
            self.message = (f"#{nid} queued again with the same event id." if ok else
                            f"#{nid} left as it is: {ok.refused.detail}; the person can ask for a new code."
                            if ok.refused else f"#{nid} is no longer FAILED.")
        else:
            done = await asyncio.to_thread(lambda: review_actions.resolve(scope, int(nid), actor_ref=actor,
                                                                          note=note))
            self.message = f"#{nid} marked resolved by hand." if done else f"#{nid} could not be resolved."
        return OpsState.load

    async def _bulk(self, action: str, lane: str, note: str) -> Followup:
        """The rows ticked, or every failed row of a lane since T: one commit, each row kept with who and why. A row
        already replayed or resolved (by anyone, meanwhile) matches nothing: a second click changes nothing."""
        kind, act = action.split("_")[0], CONFIRM[action][1]
        if not await self._allowed(act):
            self.message = refusal(act)
            return None
        scope, actor, ids, since = self._scope(), self._actor_ref, list(self._bulk_ids), self._bulk_from
        if action.endswith("_selected"):
            done = await asyncio.to_thread(lambda: review_actions.review_many(kind, scope, ids, actor_ref=actor,
                                                                              note=note))
            asked = len(ids)
        else:
            if lane not in LANES or not since:
                return None
            done = await asyncio.to_thread(lambda: review_actions.review_lane(
                kind, scope, lane, datetime.fromisoformat(since), actor_ref=actor, note=note))
            asked = len(done.done) + done.left
        verb = "queued again with the same event ids" if kind == "replay" else "marked resolved by hand"
        unchanged = asked - len(done.done) - len(done.refused) if action.endswith("_selected") else 0
        self.message = (f"{len(done.done)} message(s) {verb}"
                        + (f"; {unchanged} no longer needed it" if unchanged > 0 else "")
                        + (f"; left as it is: {review_actions.left_as_it_is(done.refused)}" if done.refused else "")
                        + (f"; {done.left} more left: run it again" if done.left else "") + ".")
        self.selected, self._bulk_ids, self._bulk_from = [], [], ""
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



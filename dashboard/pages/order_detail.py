"""One order: status, revision, approve/cancel with the revision the operator saw, and its notifications.

Live: a background task per open tab registers with the process's one Redis subscription (dashboard/live.py) for
the order's channel and, per hint, reloads from PostgreSQL outside the state lock; the hub's periodic check of
`order_views.order_version` reloads it too if a hint was lost. `seen` lives in the browser's
sessionStorage, so after a reconnect the page knows which revision the browser last displayed — any change since,
one or many, shows the missed-refresh note with what changed.

This module is the page's state; its components (and its `PAGE`) are `order_detail_view.py`'s, what it reads and
how it words it `order_detail_data.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import reflex as rx

from dashboard import live
from dashboard.components import NOTE_MAX
from dashboard.events import Followup, event
from dashboard.format import MAX_ID, money, parse_id, when
from dashboard.live_task import LiveTask
from dashboard.pages.order_detail_data import PAST, history_page, load_order, missed_text, pushed_head, refused_text
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.delivery import wakeups as telemetry
from domain.delivery.queue import order_channel
from domain.delivery.wakeups import after_commit
from domain.orders import views as order_views
from domain.orders.commands import Committed, NotFound, execute_order_command
from domain.orders.policy import Reject, allowed_commands


class OrderState(AuthState):
    """The page's handlers and what a push seldom changes. What a push does change lives in substates (OrderHeadState,
    OrderNotesState, and OrderSeenState, which no component reads): the browser keeps one store per state and re-renders
    only the components that read a state whose values changed, so a delta re-renders the order's head and its
    notifications table, not every component of the page. The substates have no event handlers: every entry point is
    here and asks for the login, tenant and role itself."""

    order_id: rx.Field[int] = rx.field(0)
    found: rx.Field[bool] = rx.field(True)
    customer: rx.Field[str] = rx.field("")
    amount: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")
    notice: rx.Field[str] = rx.field("")
    missed: rx.Field[str] = rx.field("")
    busy: rx.Field[bool] = rx.field(False)
    # The cancel's confirmation: open while asking, with its own error (a note is required).
    asking_cancel: rx.Field[bool] = rx.field(False)
    cancel_error: rx.Field[str] = rx.field("")
    _version: str | None = None  # backend-only: `order_views.order_version` read just before what is shown
    _cancel_seen: object = None  # backend-only: the revision shown when the cancel was asked for (`ask_cancel`)

    async def _apply(self, order: dict[str, Any] | None, notes: list[dict[str, str]], version: str | None) -> None:
        """Everything at once (a page load, a reconnect)."""
        await self._apply_head(order, version)
        await self._apply_notes(order, notes)

    async def _apply_head(self, order: dict[str, Any] | None, version: str | None) -> None:
        """The order itself: status, revision, who and when, the actions its state allows."""
        self._version = version
        if order is None:
            self.found = False
            return
        head = await self.get_state(OrderHeadState)
        new_rev = int(order["revision"])
        allowed = allowed_commands(order["status"])
        # Only what changed is assigned (a push then carries a small delta, and a state nothing changed in is not
        # sent at all); only what the state allows is offered (the handler still asks the policy: a forged event
        # gets its answer).
        self._assign_changed(found=True, customer=order["customer_ref"],
                             amount=money(order["amount_cents"], order["currency"]))
        head._assign_changed(
            status=order["status"], revision=new_rev, updated=when(order["updated_at"]),
            last_change=order["last_change"], cancelled_by=order["cancelled_by"],
            can_approve="approve" in allowed, can_fulfill="fulfill" in allowed, can_cancel="cancel" in allowed)

    async def _apply_status(self, revision: int, status: str) -> None:
        """The revision and status a commit announced (its hint, or this tab's own command's answer), shown before
        the reload brings who and when and the notifications: the smallest delta there is (the revision, the
        status badge, the actions that status allows). `_version` and `seen` stay as they were, so a reload that
        does not follow (a failed read) still leaves this view behind for the hub's check to reload."""
        allowed = allowed_commands(status)
        (await self.get_state(OrderHeadState))._assign_changed(
            status=status, revision=revision, can_approve="approve" in allowed, can_fulfill="fulfill" in allowed,
            can_cancel="cancel" in allowed)

    async def _apply_notes(self, order: dict[str, Any] | None, notes: list[dict[str, str]]) -> None:
        """The notifications and the history's newest page, then `seen`: the page now shows this revision whole."""
        if order is not None:
            (await self.get_state(OrderNotesState))._assign_changed(notifications=notes)
            history = await self.get_state(OrderHistoryState)
            if not history._before and not history._after:  # an operator reading older changes keeps their page
                rows, older = order["history"]
                history._assign_changed(rows=rows, has_older=older, has_newer=False)
            (await self.get_state(OrderSeenState))._assign_changed(seen=f"{self.order_id}:{int(order['revision'])}")

    @event
    async def load(self) -> Followup:
        """Runs on every page load AND every websocket (re)connect: authoritative reload from PostgreSQL."""
        if not self._tenant_id:
            return None
        oid = parse_id(self.router.url.path.rstrip("/").rsplit("/", 1)[-1])
        if oid is None:
            self.found = False
            return None
        if oid != self.order_id:
            self.missed, self.error, self.notice = "", "", ""
            (await self.get_state(OrderHeadState))._assign_changed(pushed="")
        history = await self.get_state(OrderHistoryState)
        history._before = history._after = 0  # a load shows the newest changes
        self.order_id = oid
        order, notes, version = await asyncio.to_thread(load_order, self._tenant_id, self.order_id)
        # What this browser tab last showed whole (its sessionStorage, sent with the reconnect): any revision since
        # is a change the operator has not seen — one as much as many.
        shown_order, _, shown_rev = (await self.get_state(OrderSeenState)).seen.partition(":")
        if order is not None and shown_order == str(oid) and shown_rev.isdigit():
            self.missed = missed_text(int(shown_rev), int(order["revision"]), order["last_change"]) or self.missed
        await self._apply(order, notes, version)
        return OrderState.watch if self.found else None

    async def _command(self, command: str, seen_revision: object, note: str = "") -> AsyncIterator[Followup]:
        self.busy, self.error, self.notice = True, "", ""
        head = await self.get_state(OrderHeadState)
        head._assign_changed(pushed="")
        yield None
        if not self.order_id or not await self._allowed(Act.ORDERS):
            self.busy, self.error = False, refusal(Act.ORDERS)
            return
        # The revision the operator saw when clicking (the page sends it); without one, the revision this tab's
        # server state last delivered.
        expected = head.revision if seen_revision is None else seen_revision
        if isinstance(expected, bool) or not isinstance(expected, int) or not 1 <= expected <= MAX_ID:
            self.busy, self.error = False, ("That action did not say which revision of the order it was for: "
                                            "nothing was changed.")
            return
        result = await asyncio.to_thread(
            execute_order_command, tenant_id=self._tenant_id, order_id=self.order_id, command=command,
            expected_revision=expected, actor_ref=self._actor_ref, request_id=f"ui-{uuid.uuid4().hex[:12]}",
            note=note)
        if isinstance(result, Committed):
            await after_commit(await live.arq(), result)
            self.notice = f"{PAST[command]} at revision {result.revision} · event {result.event_id}"
            # What the commit itself says (revision, status, the actions it allows) goes out before the reload.
            await self._apply_status(result.revision, result.status)
            yield None
        elif isinstance(result, NotFound):
            self.error = "This order no longer exists for your tenant."
        order, notes, version = await asyncio.to_thread(load_order, self._tenant_id, self.order_id)
        if isinstance(result, Reject):
            change = order["last_change"] if order else ""  # who moved it, e.g. "approved by alice at …"
            self.error = refused_text(result, command, change)
        # The answer first (status, revision, the buttons), the notifications table in a delta of its own after it.
        await self._apply_head(order, version)
        self.busy = False
        yield None
        await self._apply_notes(order, notes)

    @event
    async def approve(self, seen_revision: int | None = None) -> AsyncIterator[Followup]:
        async for u in self._command("approve", seen_revision):
            yield u

    @event
    async def ask_cancel(self, seen_revision: int | None = None) -> None:
        """Step one of a cancel: say what it does (the customer is told; it cannot be undone) and ask why. The
        revision the operator saw is kept for step two: an order that moves meanwhile is refused there."""
        self.error = self.notice = self.cancel_error = ""
        self._cancel_seen = seen_revision
        if not self.order_id or not await self._allowed(Act.ORDERS):
            self.error = refusal(Act.ORDERS)
            return
        self.asking_cancel = True

    @event
    def close_cancel(self) -> None:
        self.asking_cancel, self.cancel_error = False, ""

    @event
    async def cancel(self, form: dict[str, str]) -> AsyncIterator[Followup]:
        """Step two: the cancel at the revision shown, its note kept with who cancelled (one audit row, in the
        command's own transaction). No note: nothing happens and the dialog says why."""
        if not self.order_id or not await self._allowed(Act.ORDERS):
            self.asking_cancel, self.error = False, refusal(Act.ORDERS)
            return
        note = str(form.get("note", "") if isinstance(form, dict) else "").strip()
        if not note or len(note) > NOTE_MAX:
            self.cancel_error = f"Say why (1 to {NOTE_MAX} characters): the note is kept with your name."
            return
        self.asking_cancel, self.cancel_error = False, ""
        async for u in self._command("cancel", self._cancel_seen, note):
            yield u

    @event
    async def fulfill(self, seen_revision: int | None = None) -> AsyncIterator[Followup]:
        async for u in self._command("fulfill", seen_revision):
            yield u

    async def _history_page(self, before: int, after: int) -> None:
        """A page of the order's history (keyset on the revision), for an operator of its tenant with a live session."""
        if not self.order_id or not await self._fresh() or not self._tenant_id:
            return
        rows, older, newer = await asyncio.to_thread(history_page, self._tenant_id, self.order_id, before, after)
        history = await self.get_state(OrderHistoryState)
        history._before, history._after = before, after
        history._assign_changed(rows=rows, has_older=older, has_newer=newer)

    @event
    async def history_older(self) -> None:
        rows = (await self.get_state(OrderHistoryState)).rows
        if rows:
            await self._history_page(int(rows[-1]["id"]), 0)

    @event
    async def history_newer(self) -> None:
        rows = (await self.get_state(OrderHistoryState)).rows
        if rows:
            await self._history_page(0, int(rows[0]["id"]))

    @event
    def dismiss_missed(self) -> None:
        self.missed = ""

    @event(background=True)
    async def watch(self) -> None:
        task, (order_id, seen) = await LiveTask.start_reading(self, lambda: (self.order_id, self._version))
        tenant = task.tenant
        if not tenant or not order_id:
            return  # a live task needs a logged-in operator of a tenant
        view = task.view(order_channel(tenant, order_id),
                         functools.partial(order_views.order_version, tenant, order_id), seen)
        async with contextlib.aclosing(view.hints()) as hints:
            async for msg in hints:
                # The message is only a hint: reload authorized state outside the lock, then assign. An order's own
                # hint says the revision and status it committed: those are shown as soon as the session check (one
                # small read) allows, and the reload starts only after them — started together, the reload's
                # heavier read (its thread holding the interpreter lock in 5 ms slices) held up the check and so the
                # revision by 10-20 ms on a loaded machine. Any other hint (a notification's, a check, a resync)
                # shows nothing early: its check and reload start together.
                pushed = pushed_head(msg)
                ended_t = asyncio.ensure_future(task.session_ended())
                load_t = None if pushed else asyncio.ensure_future(asyncio.to_thread(load_order, tenant, order_id))
                try:
                    mine, shown = await self._show_hint(pushed, ended_t, task, order_id)
                    if not mine:
                        return
                    if load_t is None:
                        load_t = asyncio.ensure_future(asyncio.to_thread(load_order, tenant, order_id))
                    _, (order, notes, version) = await asyncio.gather(ended_t, load_t)
                finally:
                    for t in (ended_t, load_t):
                        if t is not None:
                            t.cancel()  # a task that returns or is cancelled leaves no read running for it
                # Two deltas: the head (status, revision, who and when) goes out as soon as this block exits and
                # renders on its own; the notifications table follows in a second, smaller-than-the-page render.
                async with self:
                    if not self._still_mine(task, order_id):
                        return  # another order, or logged out in this tab
                    head = await self.get_state(OrderHeadState)
                    before = head.revision if shown is None else shown  # what the view showed before this hint
                    rev = msg.get("revision", -1)
                    # A hint announces one revision: a hint beyond the next one means revisions reached this view
                    # unannounced. (A reload found by the periodic check is a catch-up: the pushed-change callout
                    # below says what changed.)
                    if order and msg.get("kind") == "order" and isinstance(rev, int) and rev > before + 1:
                        self.missed = missed_text(before, int(order["revision"]), order["last_change"]) \
                            or self.missed
                    if order and int(order["revision"]) > before and not self.busy:
                        head.pushed = order["last_change"]  # a change made elsewhere: say who and when
                    await self._apply_head(order, version)
                async with self:
                    if not self._still_mine(task, order_id):
                        return
                    await self._apply_notes(order, notes)
                view.seen = version
                if msg.get("kind") == "order" and msg.get("published_at"):
                    latency = (time.time() - float(msg["published_at"])) * 1000
                    await asyncio.to_thread(telemetry.record_push_latency, tenant, latency)

    async def _show_hint(self, pushed: tuple[int, str] | None, ended_t: asyncio.Future[bool], task: LiveTask,
                         order_id: int) -> tuple[bool, int | None]:
        """A hint's revision and status (`pushed_head`), shown before the reload when they are ahead of this view and
        its session has not ended. Returns whether the tab is still this operator's view of this order (if not, the
        live task stops) and the revision the view showed before the hint's, or None when nothing was shown."""
        if pushed is None:
            return True, None
        await ended_t
        async with self:
            if not self._still_mine(task, order_id):
                return False, None
            head = await self.get_state(OrderHeadState)
            before = head.revision
            if not self.found or self.busy or pushed[0] <= before:
                return True, None  # not shown (its own command is answering it, or the view is already there)
            await self._apply_status(*pushed)
            return True, before

    def _still_mine(self, task: LiveTask, order_id: int) -> bool:
        """Under the state lock, before the live task assigns: the tab still shows this order to the task's operator,
        whose session has not ended (`LiveTask.still_mine`: an ended one is forgotten, as any handler's `_fresh`
        would)."""
        return task.still_mine() and self.order_id == order_id


class OrderHeadState(OrderState):
    """What every push changes, beside the notifications: read by the status card and the pushed-change callout."""

    status: rx.Field[str] = rx.field("")
    revision: rx.Field[int] = rx.field(0)
    updated: rx.Field[str] = rx.field("")
    last_change: rx.Field[str] = rx.field("")  # "approved by alice at 07:46:29"
    cancelled_by: rx.Field[str] = rx.field("")  # "Cancelled by alice at … UTC: customer asked" (the audit row)
    pushed: rx.Field[str] = rx.field("")  # the last change another operator made while this page was open
    can_approve: rx.Field[bool] = rx.field(False)
    can_fulfill: rx.Field[bool] = rx.field(False)
    can_cancel: rx.Field[bool] = rx.field(False)


class OrderNotesState(OrderState):
    """The order's notifications (the events panel): the page's biggest part, re-rendered only when they change."""

    notifications: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)


class OrderHistoryState(OrderState):
    """The order's history, a page at a time (newest first): every change, who made it, when, with its note."""

    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)
    _before: int = 0  # backend-only: the page position by revision (0: the newest page, kept fresh by pushes)
    _after: int = 0


class OrderSeenState(OrderState):
    """`seen`, "<order_id>:<revision>" last delivered whole to this browser tab, in its sessionStorage: after a
    reconnect the page knows which revision the browser last displayed. No component reads it (a change re-renders
    nothing), and it is written with the last delta of a reload: the browser's sessionStorage write is a synchronous
    call to its browser process that would otherwise hold up rendering the head."""

    seen: str = rx.SessionStorage("", name="outbox_seen_revision")

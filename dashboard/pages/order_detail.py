"""One order: status, revision, approve/cancel with the revision the operator saw, and its notifications.

Live: a background task per open tab registers with the process's one Redis subscription (dashboard/live.py) for
the order's channel and, per hint, reloads from PostgreSQL outside the state lock; the hub's periodic check of
`order_views.order_version` reloads it too if a hint was lost. `seen` lives in the browser's
sessionStorage, so after a reconnect the page knows which revision the browser last displayed — any change since,
one or many, shows the missed-refresh note with what changed.
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

from dashboard import live, paging, routes
from dashboard.components import (
    NOTE_MAX,
    Row,
    card,
    data_table,
    empty_state,
    error_callout,
    icon,
    note_dialog,
    pick,
    shell,
    status_badge,
)
from dashboard.events import Followup, event
from dashboard.format import MAX_ID, change_line, done_line, money, notification, parse_id, when
from dashboard.link import action_button
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access import actions as operator_actions
from domain.access.roles import Act, refusal
from domain.delivery import wakeups as telemetry
from domain.delivery.queue import order_channel
from domain.delivery.wakeups import after_commit
from domain.orders import views as order_views
from domain.orders.commands import Committed, NotFound, execute_order_command
from domain.orders.policy import Reject, allowed_commands
from domain.orders.views import ORDER_CANCEL, order_target
from domain.support import pages
from domain.support.pages import keyset
from domain.vocabulary import ORDER_STATUSES

PAST = {"approve": "approved", "cancel": "cancelled", "fulfill": "fulfilled"}

ERROR_TEXT = {
    "optimistic_conflict": "Someone changed this order first{change}: it is now at revision {rev}. "
                           "The page shows the latest state; check it and try again.",
    "policy_denied": "Not allowed: an order that is {status} cannot be {requested}. Nothing was changed.",
    "unknown_command": "Unknown action.",
}


def _load(tenant: int, order_id: int) -> tuple[dict[str, Any] | None, list[dict[str, str]], str | None]:
    """The version first, then the data: what is shown is at least as new as the version kept with it."""
    version, order, change, notes = order_views.order_page(tenant, order_id)
    if order is None:
        return None, [], version
    order["last_change"] = change_line(change)
    first = keyset(order.pop("history"), HISTORY_PAGE, None, None)
    order["history"] = ([history_row(h) for h in first.rows], first.has_older)
    # Who cancelled it, when and why, from the audit log: read only for a cancelled order (a push reloads this).
    order["cancelled_by"] = ""
    if order["status"] == "cancelled":
        done = [a for a in operator_actions.on_target(tenant, order_target(order_id)) if a["action"] == ORDER_CANCEL]
        order["cancelled_by"] = done_line("Cancelled", done[-1] if done else None)
    return order, [notification(n) for n in notes], version


HISTORY_PAGE = 20  # changes per page of the order's history (order_views.order_page reads one more)


def history_row(h: dict[str, Any]) -> dict[str, str]:
    """One change of the order, for its history table: revision, what, who, when (UTC), the note. Pure."""
    who = str(h["actor_ref"] or "")
    return {"id": str(h["id"]), "what": str(h["event_type"]).removeprefix("order."),
            "who": who.removeprefix("operator:") or "—", "at": when(h["occurred_at"]), "note": h.get("note") or ""}


def missed_text(shown: int, now: int, last_change: str) -> str:
    """What changed while the page could not show it: the order went from revision `shown` (what this tab last showed)
    to `now` — one change or many — or nothing to say ("")."""
    if now <= shown:
        return ""
    changes = "1 change" if now - shown == 1 else f"{now - shown} changes"
    last = f" ({last_change})" if now - shown == 1 else f" (the last: {last_change})"
    return (f"refresh missed — reloaded at revision {now}: {changes} since this page showed revision {shown}"
            f"{last if last_change else ''}")


def pushed_head(msg: dict[str, Any]) -> tuple[int, str] | None:
    """The revision and status an order's own hint says it committed (`wakeups.refresh_message`), or None: a hint
    of another kind, or one whose values are not a plain revision and a known status, shows nothing before the
    reload. Pure."""
    rev, status = msg.get("revision"), msg.get("status")
    if msg.get("kind") != "order" or isinstance(rev, bool) or not isinstance(rev, int) or not 1 <= rev <= MAX_ID:
        return None
    return (rev, status) if isinstance(status, str) and status in ORDER_STATUSES else None


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
        order, notes, version = await asyncio.to_thread(_load, self._tenant_id, self.order_id)
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
        order, notes, version = await asyncio.to_thread(_load, self._tenant_id, self.order_id)
        if isinstance(result, Reject):
            change = order["last_change"] if order else ""  # who moved it, e.g. "approved by alice at …"
            self.error = ERROR_TEXT[result.error].format(rev=result.current_revision, status=result.current_status,
                                                         requested=PAST[command],
                                                         change=f" ({change})" if change else "")
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
        page = await asyncio.to_thread(pages.order_history, self._tenant_id, self.order_id, HISTORY_PAGE,
                                       before or None, after or None)
        history = await self.get_state(OrderHistoryState)
        history._before, history._after = before, after
        history._assign_changed(rows=[history_row(h) for h in page.rows], has_older=page.has_older,
                                has_newer=page.has_newer)

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
        still_wanted = live.take_over_watch(self.router.session.client_token)
        async with self:
            session, order_id, seen, hashed = self._session(), self.order_id, self._version, self._session_hash
        tenant = session[0]
        if not tenant or not order_id:
            return  # a live task needs a logged-in operator of a tenant
        view = live.view(order_channel(tenant, order_id), still_wanted,
                         functools.partial(order_views.order_version, tenant, order_id), seen)
        async with contextlib.aclosing(view.hints()) as hints:
            async for msg in hints:
                # The message is only a hint: reload authorized state outside the lock, then assign. The session
                # check (one small read) and the reload start together; an order's own hint says the revision and
                # status it committed, shown as soon as the session check allows, ahead of the reload.
                ended_t = asyncio.ensure_future(self._session_ended(hashed))
                load_t = asyncio.ensure_future(asyncio.to_thread(_load, tenant, order_id))
                try:
                    mine, shown = await self._show_hint(pushed_head(msg), ended_t, session, order_id)
                    if not mine:
                        return
                    ended, (order, notes, version) = await asyncio.gather(ended_t, load_t)
                finally:
                    for t in (ended_t, load_t):
                        t.cancel()  # a task that returns or is cancelled leaves no read running for it
                # Two deltas: the head (status, revision, who and when) goes out as soon as this block exits and
                # renders on its own; the notifications table follows in a second, smaller-than-the-page render.
                async with self:
                    if not self._still_mine(ended, session, order_id):
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
                    if not self._still_mine(False, session, order_id):
                        return
                    await self._apply_notes(order, notes)
                view.seen = version
                if msg.get("kind") == "order" and msg.get("published_at"):
                    latency = (time.time() - float(msg["published_at"])) * 1000
                    await asyncio.to_thread(telemetry.record_push_latency, tenant, latency)

    async def _show_hint(self, pushed: tuple[int, str] | None, ended_t: asyncio.Future[bool],
                         session: tuple[int, int], order_id: int) -> tuple[bool, int | None]:
        """A hint's revision and status (`pushed_head`), shown before the reload when they are ahead of this view and
        its session has not ended. Returns whether the tab is still this operator's view of this order (if not, the
        live task stops) and the revision the view showed before the hint's, or None when nothing was shown."""
        if pushed is None:
            return True, None
        ended = await ended_t
        async with self:
            if not self._still_mine(ended, session, order_id):
                return False, None
            head = await self.get_state(OrderHeadState)
            before = head.revision
            if not self.found or self.busy or pushed[0] <= before:
                return True, None  # not shown (its own command is answering it, or the view is already there)
            await self._apply_status(*pushed)
            return True, before

    def _still_mine(self, ended: bool, session: tuple[int, int], order_id: int) -> bool:
        """Under the state lock, before a live task assigns: the tab still shows this order to this operator, whose
        session has not ended (an ended one is forgotten here, as any handler's `_fresh` would)."""
        if ended:
            self._forget_if(session)
        return not ended and self.order_id == order_id and self._session() == session


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


def _history_row(h: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(h["id"]), rx.table.cell(rx.badge(h["what"], variant="soft")),
                        rx.table.cell(h["who"]), rx.table.cell(rx.text(h["at"], size="1")),
                        rx.table.cell(rx.text(h["note"], size="1")), data_testid="history-row")


class OrderSeenState(OrderState):
    """`seen`, "<order_id>:<revision>" last delivered whole to this browser tab, in its sessionStorage: after a
    reconnect the page knows which revision the browser last displayed. No component reads it (a change re-renders
    nothing), and it is written with the last delta of a reload: the browser's sessionStorage write is a synchronous
    call to its browser process that would otherwise hold up rendering the head."""

    seen: str = rx.SessionStorage("", name="outbox_seen_revision")


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
                      rx.text(n["display_status"], size="1", color=rx.color("gray", 11),
                              data_testid="notification-state"), spacing="2", align="center"),
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
                        rx.vstack(rx.text("Status", size="1", color=rx.color("gray", 11)),
                                  rx.box(status_badge(OrderHeadState.status, size="3"), data_testid="order-status",
                                         data_status=OrderHeadState.status), spacing="1"),
                        rx.vstack(rx.text("Revision", size="1", color=rx.color("gray", 11)),
                                  rx.heading(OrderHeadState.revision, size="7", data_testid="order-revision"),
                                  spacing="1"),
                        rx.vstack(rx.text("Customer", size="1", color=rx.color("gray", 11)),
                                  rx.text(OrderState.customer, weight="medium", data_testid="order-customer"),
                                  spacing="1"),
                        rx.vstack(rx.text("Amount", size="1", color=rx.color("gray", 11)),
                                  rx.text(OrderState.amount, weight="medium", data_testid="order-amount"), spacing="1"),
                        rx.vstack(rx.text("Updated (UTC)", size="1", color=rx.color("gray", 11)),
                                  rx.text(OrderHeadState.updated, size="2"), spacing="1"),
                        rx.cond(OrderHeadState.last_change != "", rx.vstack(
                            rx.text("Last change (UTC)", size="1", color=rx.color("gray", 11)),
                            rx.text(OrderHeadState.last_change, size="2", data_testid="last-change"), spacing="1")),
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

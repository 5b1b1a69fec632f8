"""Balance: what the tenant has, what it spent in the last hour, when it runs out at that rate, every entry (paged),
and a top-up for on-call operators (checked in the handler, not only by hiding the form)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import reflex as rx

from dashboard import paging, routes
from dashboard.components import (
    NOTE_MAX,
    Row,
    card,
    data_table,
    error_callout,
    note_dialog,
    secondary,
    shell,
    stat,
)
from dashboard.events import Followup, event
from dashboard.format import amount_in_words, money, parse_id, when
from dashboard.link import action_button, action_form
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.ledger import metering
from domain.ledger.reasons import entry_reason
from domain.support.pages import Keyset, keyset

PAGE_SIZE = 50  # entries of one hour per page
HOURS_PAGE = 24  # hours per page of the by-the-hour view
KIND_TEXT = {"opening": "opening balance", "top_up": "top-up", "reserve": "message charged",
             "refund": "refund", "adjustment": "adjustment"}
KIND_MANY = {"reserve": ("charge", "charges"), "refund": ("refund", "refunds")}


def _entry(e: dict[str, Any]) -> dict[str, str]:
    amount = int(e["amount_cents"])
    return {"id": str(e["id"]), "at": when(e["created_at"]), "kind": KIND_TEXT.get(e["kind"], e["kind"]),
            "amount": ("+" if amount > 0 else "") + money(amount), "reason": entry_reason(e["reason"]),
            "who": str(e["actor_ref"] or "—"), "message": f"#{e['notification_id']}" if e["notification_id"] else "",
            "message_id": str(e["notification_id"] or "")}


def hour_text(hour: int) -> str:
    """Hour `hour` since the epoch as the page prints it: "2026-12-01 14:00–15:00". Pure."""
    start = datetime.fromtimestamp(hour * 3600, UTC)
    return f"{start:%Y-%m-%d %H:00}–{(start + timedelta(hours=1)):%H:00}"


def hour_row(s: dict[str, Any]) -> dict[str, str]:
    """One row of the by-the-hour view: an hour's charges (or refunds) summed — "312 charges", "-3.12 EUR" — or
    one top-up, opening or adjustment with its reason and who. Pure."""
    amount, n = int(s["amount_cents"]), int(s["entries"])
    one, many = KIND_MANY.get(s["kind"], (KIND_TEXT.get(s["kind"], s["kind"]), KIND_TEXT.get(s["kind"], s["kind"])))
    summed = s["kind"] in KIND_MANY
    return {"id": str(s["hour"]), "at": hour_text(int(s["hour"])),
            "kind": f"{n:,} {one if n == 1 else many}" if summed else KIND_TEXT.get(s["kind"], s["kind"]),
            "amount": ("+" if amount > 0 else "") + money(amount),
            "reason": "" if summed and n > 1 else entry_reason(s["reason"]),
            "who": "" if summed else str(s["actor_ref"] or "—")}


def runs_out_text(runs_out_at: str | None, spent_last_hour_cents: int) -> str:
    """When the balance runs out at the last hour's spend (the stat's label says that it is that forecast, the stat
    beside it what the spend was), or why it does not. Pure."""
    if not runs_out_at:
        return "not at this rate" if spent_last_hour_cents else "nothing spent in the last hour"
    return f"{runs_out_at[:16].replace('T', ' ')} UTC"


def _hours_page(tenant: int, before: int, after: int) -> Keyset:
    """A page of hours with entries (keyset on the hour since the epoch) and their sums, newest first."""
    got = keyset([{"id": h} for h in metering.balance_hours(tenant, HOURS_PAGE + 1, before or None, after or None)],
                  HOURS_PAGE, before or None, after or None)
    hours = {int(r["id"]) for r in got.rows}
    sums = metering.hour_sums(tenant, min(hours), max(hours)) if hours else []
    return Keyset([s for s in sums if int(s["hour"]) in hours], got.has_older, got.has_newer)


def _hour_bound() -> int:
    """The newest hour a page may name (the next one): beyond it there is nothing, and far beyond it neither Python
    nor PostgreSQL can say the hour as a time."""
    return int(datetime.now(UTC).timestamp()) // 3600 + 1


def _an_hour(raw: object) -> int:
    """An hour since the epoch from the browser, or 0 (the hours view) for anything that cannot be one."""
    h = parse_id(raw)
    return h if h is not None and h <= _hour_bound() else 0


def _read(tenant: int, hour: int, before: int, after: int) -> tuple[list[dict[str, str]], bool, bool]:
    if not hour:  # the hours view: its positions are hours too
        before, after = min(before, _hour_bound()), min(after, _hour_bound())
    if hour:
        p = keyset(metering.hour_entries(tenant, hour, PAGE_SIZE + 1, before or None, after or None), PAGE_SIZE,
                   before or None, after or None)
        return [_entry(e) for e in p.rows], p.has_older, p.has_newer
    p = _hours_page(tenant, before, after)
    return [hour_row(s) for s in p.rows], p.has_older, p.has_newer


class BalanceState(paging.KeysetPaged, AuthState):
    balance: rx.Field[str] = rx.field("")
    spent: rx.Field[str] = rx.field("")
    runs_out: rx.Field[str] = rx.field("")
    # By the hour (hour 0), or one hour's entries (`hour`: hours since the epoch, UTC); paged Older / Newer.
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    hour: rx.Field[int] = rx.field(0)
    hour_title: rx.Field[str] = rx.field("")
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)
    notice: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")
    # The top-up's confirmation: the amount in figures and in words, the reference; open while `confirm_text` is set.
    confirm_text: rx.Field[str] = rx.field("")
    _pending: tuple[int, str] = (0, "")  # backend-only: (cents, reference) as validated in step one

    @event
    async def load(self) -> Followup:
        """A page load: the hour and the position from the URL, then the figures and the page."""
        params = self.router.url.query_parameters
        self.hour = _an_hour(params.get("hour", ""))
        before, after = paging.position(params)
        self._before, self._after = before or 0, after or 0
        await self._query()
        return None

    async def _query(self) -> None:
        if not await self._fresh() or not self._tenant_id:
            return
        tenant, where = self._tenant_id, (self.hour, self._before, self._after)
        view, (rows, older, newer) = await asyncio.gather(
            asyncio.to_thread(metering.balance_view, tenant, datetime.now(UTC)),
            asyncio.to_thread(_read, tenant, *where))
        self.balance, self.spent = money(view["balance_cents"]), money(view["spent_last_hour_cents"])
        self.runs_out = runs_out_text(view["runs_out_at"], int(view["spent_last_hour_cents"]))
        self.rows, self.has_older, self.has_newer = rows, older, newer
        self.hour_title = f"Entries of {hour_text(self.hour)} UTC, newest first" if self.hour else ""

    def _url(self) -> Followup:
        return paging.replace_url(routes.BALANCE, {"hour": self.hour, "before": self._before, "after": self._after})

    @event
    async def show_hour(self, hour: str) -> Followup:
        """One hour's entries, each with its message (a read: the browser moves, nothing changes)."""
        h = _an_hour(hour)
        if not h or not await self._page_allowed():
            return None
        self.hour, self._before, self._after = h, 0, 0
        await self._query()
        return self._url()

    @event
    async def show_hours(self) -> Followup:
        if not await self._page_allowed():
            return None
        self.hour, self._before, self._after = 0, 0, 0
        await self._query()
        return self._url()

    async def load_figures(self) -> None:
        """After a top-up: the figures and the newest page again."""
        self._before = self._after = 0
        await self._query()

    @event
    async def top_up(self, form: dict[str, str]) -> None:
        """Step one: check the amount and the reference, then read them back in words. Nothing is credited yet."""
        self.notice = self.error = self.confirm_text = ""
        self._pending = (0, "")
        if not await self._allowed(Act.TOP_UP) or not self._tenant_id:
            self.error = refusal(Act.TOP_UP)
            return
        form = form if isinstance(form, dict) else {}
        try:
            cents = round(float(str(form.get("amount", "")).replace(",", "")) * 100)
        except (ValueError, OverflowError):
            cents = 0
        reference = str(form.get("reference", "")).strip()
        if not 0 < cents <= 10**9 or not reference or len(reference) > 100:
            self.error = "Give an amount between 0.01 and 10,000,000.00 and the payment's reference; nothing changed."
            return
        self._pending = (cents, reference)
        self.confirm_text = (f"Credit {money(cents)} — {amount_in_words(cents)} — to this tenant's balance, "
                             f"for payment {reference}? Your name and the time are kept in the audit log.")

    @event
    def close_top_up(self) -> None:
        self.confirm_text, self._pending = "", (0, "")

    @event
    async def confirm_top_up(self, form: dict[str, str]) -> None:
        """Step two: credit what step one read back (a reference credits once), the optional note kept with it."""
        self.notice = self.error = ""
        (cents, reference), self._pending, self.confirm_text = self._pending, (0, ""), ""
        if not await self._allowed(Act.TOP_UP) or not self._tenant_id:
            self.error = refusal(Act.TOP_UP)
            return
        if not cents or not reference:
            return
        note = str(form.get("note", "") if isinstance(form, dict) else "").strip()[:NOTE_MAX]
        tenant, actor = self._tenant_id, self._actor_ref
        try:
            r = await asyncio.to_thread(lambda: metering.top_up(tenant, cents, reference, actor, note=note))
        except metering.BalanceLimit as exc:  # the API's 422 `balance_limit`, in the same plain words
            self.error = f"Not credited: {exc}."
            return
        self.notice = (f"Credited {money(cents)} (reference {reference})." if r.credited else
                       f"Reference {reference} was already credited; nothing changed.")
        await self.load_figures()


def _confirm() -> rx.Component:
    return note_dialog(
        "Top up the balance?", BalanceState.confirm_text, open_=BalanceState.confirm_text != "",
        on_submit=BalanceState.confirm_top_up, on_keep=BalanceState.close_top_up, keep="Cancel", act="Credit it",
        placeholder="Note (optional), for whoever looks later",
        ids={"summary": "topup-confirm-text", "note": "topup-note", "keep": "topup-keep", "act": "topup-confirm",
             "dialog": "topup-dialog"})


def _entry_row(e: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(e["at"], size="1")), rx.table.cell(e["kind"]),
                        rx.table.cell(rx.text(e["amount"], weight="medium")), rx.table.cell(e["reason"]),
                        rx.table.cell(rx.link(e["message"], href="/messages/" + e["message_id"])),
                        rx.table.cell(e["who"]), data_testid="entry-row")


def _hour_row(e: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(e["at"], size="1")), rx.table.cell(e["kind"]),
                        rx.table.cell(rx.text(e["amount"], weight="medium")), rx.table.cell(e["reason"]),
                        rx.table.cell(e["who"]),
                        rx.table.cell(rx.button("Entries", size="1", variant="ghost",
                                                on_click=BalanceState.show_hour(e["id"]), data_testid="hour-open")),
                        data_testid="entry-row")


def balance_page() -> rx.Component:
    return shell(
        "Balance",
        rx.flex(stat("Balance", BalanceState.balance, "balance"),
                stat("Spent in the last hour", BalanceState.spent, "spent-hour"),
                stat("Runs out, at the last hour's spend", BalanceState.runs_out, "runs-out"),
                gap="12px", wrap="wrap", width="100%", margin_bottom="16px"),
        rx.cond(BalanceState.oncall, card(
            action_form(rx.flex(
                rx.vstack(rx.text("Amount", size="1"), rx.input(name="amount", placeholder="250.00",
                                                                data_testid="topup-amount"), spacing="1"),
                rx.vstack(rx.text("Payment reference", size="1"),
                          rx.input(name="reference", placeholder="INV-2026-118", data_testid="topup-reference"),
                          spacing="1"),
                action_button("Top up", type="submit", data_testid="topup-submit"),
                gap="12px", align="end", wrap="wrap"), on_submit=BalanceState.top_up, reset_on_submit=True),
            margin_bottom="12px")),
        rx.cond(BalanceState.notice != "", rx.callout(BalanceState.notice, icon="check", width="100%",
                                                       data_testid="balance-notice")),
        error_callout(BalanceState.error),
        _confirm(),
        rx.cond(
            BalanceState.hour > 0,
            rx.fragment(
                rx.hstack(rx.heading(BalanceState.hour_title, size="4"), rx.spacer(),
                          rx.button("All hours", size="1", variant="soft", on_click=BalanceState.show_hours,
                                    data_testid="hours-back"), align="center", margin_y="8px", width="100%"),
                paging.pager(BalanceState.older, BalanceState.newer, BalanceState.has_older, BalanceState.has_newer,
                             "entries-pager"),
                data_table(["When (UTC)", "Kind", "Amount", "Why", "Message", "Who"], BalanceState.rows, _entry_row,
                           "No entries in this hour.", "entries-table"),
            ),
            rx.fragment(
                rx.heading("By the hour, newest first", size="4", margin_y="8px"),
                secondary("An hour's charges and refunds are summed in one row each (“Entries” lists them, each "
                          "with its message); a top-up, the opening balance or an adjustment is a row of its own.",
                          margin_bottom="4px"),
                paging.pager(BalanceState.older, BalanceState.newer, BalanceState.has_older, BalanceState.has_newer,
                             "hours-pager"),
                data_table(["Hour (UTC)", "What", "Amount", "Why", "Who", ""], BalanceState.rows, _hour_row,
                           "No entries yet.", "hours-table"),
            ),
        ),
    )


PAGE = Page(routes.BALANCE, balance_page, "Balance · Outbox", [AuthState.require_login, BalanceState.load],
            ("Balance", "wallet"))

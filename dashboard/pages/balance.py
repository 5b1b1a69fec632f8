"""Balance: what the tenant has, what it spent in the last hour, when it runs out at that rate, every entry (paged),
and a top-up for on-call operators (checked in the handler, not only by hiding the form)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import reflex as rx

from dashboard import routes
from dashboard.components import Row, card, data_table, error_callout, shell, stat
from dashboard.events import event
from dashboard.format import amount_in_words, money, when
from dashboard.link import action_button, action_form
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.ledger import metering

PAGE_SIZE = 50
NOTE_MAX = 500
KIND_TEXT = {"opening": "opening balance", "top_up": "top-up", "reserve": "message charged",
             "refund": "refund", "adjustment": "adjustment"}


def _entry(e: dict[str, Any]) -> dict[str, str]:
    amount = int(e["amount_cents"])
    return {"id": str(e["id"]), "at": when(e["created_at"]), "kind": KIND_TEXT.get(e["kind"], e["kind"]),
            "amount": ("+" if amount > 0 else "") + money(amount), "reason": str(e["reason"]),
            "who": str(e["actor_ref"] or "—"), "message": f"#{e['notification_id']}" if e["notification_id"] else "",
            "message_id": str(e["notification_id"] or "")}


class BalanceState(AuthState):
    balance: rx.Field[str] = rx.field("")
    spent: rx.Field[str] = rx.field("")
    runs_out: rx.Field[str] = rx.field("")
    entries: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    more: rx.Field[bool] = rx.field(False)
    notice: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")
    # The top-up's confirmation: the amount in figures and in words, the reference; open while `confirm_text` is set.
    confirm_text: rx.Field[str] = rx.field("")
    _pending: tuple[int, str] = (0, "")  # backend-only: (cents, reference) as validated in step one

    @event
    async def load(self) -> None:
        if not self._tenant_id:
            return
        tenant = self._tenant_id
        view, rows = await asyncio.gather(asyncio.to_thread(metering.balance_view, tenant, datetime.now(UTC)),
                                          asyncio.to_thread(metering.entries, tenant, PAGE_SIZE + 1))
        self.balance, self.spent = money(view["balance_cents"]), money(view["spent_last_hour_cents"])
        self.runs_out = (view["runs_out_at"][:16].replace("T", " ") + " UTC") if view["runs_out_at"] \
            else "does not run out at this rate"
        self.entries, self.more = [_entry(e) for e in rows[:PAGE_SIZE]], len(rows) > PAGE_SIZE

    @event
    async def load_more(self) -> None:
        if not self._tenant_id or not self.entries:
            return
        rows = await asyncio.to_thread(metering.entries, self._tenant_id, PAGE_SIZE + 1, int(self.entries[-1]["id"]))
        self.entries = self.entries + [_entry(e) for e in rows[:PAGE_SIZE]]
        self.more = len(rows) > PAGE_SIZE

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
        await self.load()


def _confirm() -> rx.Component:
    return rx.alert_dialog.root(
        rx.alert_dialog.content(
            rx.alert_dialog.title("Top up the balance?"),
            rx.alert_dialog.description(BalanceState.confirm_text, size="2", data_testid="topup-confirm-text"),
            action_form(rx.vstack(
                rx.text_area(name="note", placeholder="Note (optional), for whoever looks later", max_length=NOTE_MAX,
                             width="100%", data_testid="topup-note"),
                rx.hstack(rx.spacer(),
                          rx.button("Cancel", type="button", variant="soft", color_scheme="gray",
                                    on_click=BalanceState.close_top_up, data_testid="topup-keep"),
                          action_button("Credit it", type="submit", data_testid="topup-confirm"), width="100%"),
                spacing="3", width="100%"), on_submit=BalanceState.confirm_top_up, reset_on_submit=True),
            max_width="480px", data_testid="topup-dialog"),
        open=BalanceState.confirm_text != "",
    )


def _entry_row(e: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(e["at"], size="1")), rx.table.cell(e["kind"]),
                        rx.table.cell(rx.text(e["amount"], weight="medium")), rx.table.cell(e["reason"]),
                        rx.table.cell(rx.link(e["message"], href="/messages/" + e["message_id"])),
                        rx.table.cell(e["who"]), data_testid="entry-row")


def balance_page() -> rx.Component:
    return shell(
        "Balance",
        rx.flex(stat("Balance", BalanceState.balance, "balance"),
                stat("Spent in the last hour", BalanceState.spent, "spent-hour"),
                stat("Runs out", BalanceState.runs_out, "runs-out"),
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
        rx.heading("Entries, newest first", size="4", margin_y="8px"),
        data_table(["When (UTC)", "Kind", "Amount", "Why", "Message", "Who"], BalanceState.entries, _entry_row,
                   "No entries yet.", "entries-table"),
        rx.cond(BalanceState.more, rx.button("Load more", on_click=BalanceState.load_more, variant="soft",
                                             margin_top="12px")),
    )


PAGE = Page(routes.BALANCE, balance_page, "Balance · Outbox", [AuthState.require_login, BalanceState.load],
            ("Balance", "wallet"))

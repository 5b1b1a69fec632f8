"""One recipient: "why didn't they get it?" — every message with its answer in plain words, whether we reached them
today, and the channel that actually reached them. Support acts on "stop messaging me on SMS" here; every change is
kept with who made it and when."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import reflex as rx

from dashboard import routes
from dashboard.components import (
    Row,
    caption,
    card,
    data_table,
    empty_state,
    error_callout,
    labelled,
    pick,
    secondary,
    shell,
    stat,
    status_badge,
)
from dashboard.events import event
from dashboard.format import cost_text, parse_id, when
from dashboard.link import LINK_DOWN, when_online
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.ledger import recipients
from domain.ledger.reasons import CHANNEL_NAME
from domain.ledger.recipients import PEOPLE_CHANNELS
from domain.support.ledger import recipient_messages


class RecipientState(AuthState):
    found: rx.Field[bool] = rx.field(False)
    rid: rx.Field[int] = rx.field(0)
    ref: rx.Field[str] = rx.field("")
    name: rx.Field[str] = rx.field("")
    contact: rx.Field[str] = rx.field("")
    timezone: rx.Field[str] = rx.field("")
    quiet: rx.Field[str] = rx.field("")
    cap: rx.Field[str] = rx.field("")
    opted_out: rx.Field[list[str]] = rx.field(default_factory=list)
    heard_today: rx.Field[str] = rx.field("")
    this_week: rx.Field[str] = rx.field("")
    reached_by: rx.Field[str] = rx.field("")
    messages: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    more_messages: rx.Field[bool] = rx.field(False)  # older messages than the 100 shown: paged in the ledger
    changes: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    notice: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")

    @event
    async def load(self) -> None:
        rid = parse_id(self.router.page.params.get("recipient_id", ""))
        self.notice = self.error = ""
        if not self._tenant_id or rid is None:
            self.found = False
            return
        await self._reload(rid)

    async def _reload(self, rid: int) -> None:
        tenant, now = self._tenant_id, datetime.now(UTC)
        r, why = await asyncio.gather(asyncio.to_thread(recipients.get, tenant, rid),
                                      asyncio.to_thread(recipient_messages, tenant, rid, now, 100))
        if r is None or why is None:
            self.found = False
            return
        self.found, self.rid, self.ref, self.name = True, rid, r["ref"], r["display_name"]
        self.contact = " · ".join(x for x in (r["email"], r["phone"]) if x) or "no contact point"
        self.timezone = r["timezone"]
        self.quiet = f"{r['quiet_start']}–{r['quiet_end']}" if r["quiet_start"] else "none"
        self.cap = str(r["daily_cap"]) if r["daily_cap"] is not None else "none"
        self.opted_out = list(r["opted_out_channels"])
        self.heard_today = "yes" if why["heard_from_us_today"] else "no"
        self.this_week = str(why["sent_this_week"])
        self.reached_by = ", ".join(CHANNEL_NAME.get(c, c) for c in why["reached_by"]) or "no channel yet"
        self.messages = [{"id": str(m["id"]), "created": when(m["created_at"]), "channel": m["channel"],
                          "template": m["template"], "status": m["status"], "answer": m["answer"],
                          "cost": cost_text(m), "ref": m["provider_reference"] or "—",
                          "receipt": when(m["receipt_at"])} for m in why["messages"]]
        self.more_messages = why["next_cursor"] is not None
        self.changes = [{"at": when(c["changed_at"]), "who": c["actor_ref"], "field": c["field"],
                         "old": c["old_value"] or "—", "new": c["new_value"] or "—"} for c in r["changes"]]

    @event
    async def set_channel(self, channel: str, accepts: bool) -> None:
        """An operator of this tenant may honour "stop messaging me on X"; login, role, tenant and channel are
        checked here, in the handler, whatever the browser sends."""
        if not self.rid:
            return
        if not await self._allowed(Act.PREFERENCES):
            self.error = refusal(Act.PREFERENCES)
            return
        opted_out = not bool(accepts)
        if channel not in PEOPLE_CHANNELS:
            self.error = "Unknown channel."
            return
        current = await asyncio.to_thread(recipients.get, self._tenant_id, self.rid)
        if current is None:
            self.found = False
            return
        wanted = set(current["opted_out_channels"])
        wanted = wanted | {channel} if opted_out else wanted - {channel}
        await asyncio.to_thread(recipients.update, self._tenant_id, self.rid,
                                {"opted_out_channels": sorted(wanted)}, self._actor_ref)
        verb = "will no longer get" if opted_out else "can again get"
        self.notice = f"{self.name} {verb} {CHANNEL_NAME[channel]} messages. The change is logged under your name."
        await self._reload(self.rid)


def _message_row(m: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link(rx.text("#", m["id"], " · ", m["created"], size="1"), href="/messages/" + m["id"],
                              data_testid="message-link")),
        rx.table.cell(rx.vstack(rx.text(m["channel"], weight="medium"), caption(m["template"]), spacing="0")),
        rx.table.cell(status_badge(m["status"])),
        rx.table.cell(rx.text(m["answer"], size="2", data_testid="message-answer")),
        rx.table.cell(m["cost"]),
        rx.table.cell(rx.code(m["ref"])),
        rx.table.cell(rx.text(m["receipt"], size="1")),
        data_testid="message-row",
    )


def _change_row(c: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(c["at"], size="1")), rx.table.cell(c["who"]),
                        rx.table.cell(c["field"]), rx.table.cell(c["old"]), rx.table.cell(c["new"]),
                        data_testid="change-row")


def _opt_out_switch(channel: str) -> rx.Component:
    on = RecipientState.opted_out.contains(channel)
    return rx.hstack(
        rx.switch(checked=~on, on_change=lambda accepts: when_online(RecipientState.set_channel(channel, accepts)),
                  disabled=~RecipientState.may_change | LINK_DOWN, data_testid=f"channel-{channel}"),
        rx.text(CHANNEL_NAME[channel], size="2"),
        rx.badge(pick(on, "opted out", "allowed"), color_scheme=pick(on, "red", "green"), variant="soft"),
        spacing="2", align="center")


def recipient_page() -> rx.Component:
    return shell(
        "Recipient",
        rx.cond(
            RecipientState.found,
            rx.vstack(
                card(rx.flex(
                    rx.vstack(rx.heading(RecipientState.name, size="5"),
                              secondary(RecipientState.ref, " · ", RecipientState.contact), spacing="1"),
                    rx.spacer(),
                    labelled("Timezone · quiet hours · daily cap",
                             rx.text(RecipientState.timezone, " · ", RecipientState.quiet, " · ", RecipientState.cap,
                                     size="2")),
                    gap="16px", wrap="wrap", width="100%")),
                rx.flex(stat("Heard from us today", RecipientState.heard_today, "heard-today"),
                        stat("Sent this week", RecipientState.this_week, "sent-week"),
                        stat("Reached by", RecipientState.reached_by, "reached-by"),
                        gap="12px", wrap="wrap", width="100%"),
                card(rx.text("Channels this person accepts", size="2", weight="medium", margin_bottom="8px"),
                     rx.flex(*[_opt_out_switch(c) for c in PEOPLE_CHANNELS], gap="20px", wrap="wrap")),
                rx.cond(RecipientState.notice != "", rx.callout(RecipientState.notice, icon="check", width="100%",
                                                                 data_testid="recipient-notice")),
                error_callout(RecipientState.error),
                rx.heading("Messages, newest first", size="4"),
                data_table(["Created (UTC)", "Channel", "Status", "Did they get it?", "Cost", "Provider ref",
                            "Receipt (UTC)"], RecipientState.messages, _message_row,
                           "We never messaged this person.", "messages-table"),
                rx.cond(RecipientState.more_messages, rx.link(
                    "Older messages: every message to this person, a page at a time, in the ledger →",
                    href="/ledger?recipient=" + RecipientState.ref, size="2", data_testid="older-messages")),
                rx.heading("Changes", size="4"),
                data_table(["When (UTC)", "Who", "What", "Before", "After"], RecipientState.changes, _change_row,
                           "No changes recorded.", "changes-table"),
                spacing="3", width="100%"),
            empty_state("No such recipient for your tenant."),
        ),
        actions=rx.link(rx.button("All recipients", variant="soft", size="2"), href=routes.RECIPIENTS),
    )


PAGE = Page(routes.RECIPIENT_DETAIL, recipient_page, "Recipient · Outbox",
            [AuthState.require_login, RecipientState.load])

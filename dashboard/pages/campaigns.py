"""Campaigns: start one on the bulk lane and watch it go — ledgered, sent, delivered, deferred by quiet hours,
suppressed (with reasons), failed — live, every two seconds while the page is open; cancel what is still owed."""

from __future__ import annotations

import asyncio
from typing import Any

import reflex as rx
from reflex.vars import ObjectVar

from dashboard import live, paging, routes
from dashboard.components import caption, card, data_table, error_callout, note_dialog, secondary, shell
from dashboard.events import Followup, event
from dashboard.format import money, parse_id, when
from dashboard.link import action_button, action_form
from dashboard.live_task import LiveTask
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.campaigns import fan_out as campaign_fan_out
from domain.campaigns import segments
from domain.campaigns import views as campaign_views
from domain.delivery.wakeups import wake_fan_out
from domain.ledger.reasons import suppressed_counts
from domain.ledger.recipients import PEOPLE_CHANNELS
from domain.ledger.send import SendRefused
from domain.support import pages

REFRESH_SECONDS = 2.0
ALL, PAGE_SIZE = "all", 50


def _row(s: dict[str, Any]) -> dict[str, Any]:
    total = max(1, int(s["total"]))
    settled = int(s["sent"]) + int(s["failed"]) + sum(s["suppressed"].values())
    return {"id": str(s["campaign_id"]), "name": s["name"],
            "what": f"{s['segment']} × {s['template']} by {s['channel']}",
            "status": s["status"], "total": str(s["total"]), "ledgered": str(s["ledgered"]),
            "ledgered_pct": round(100 * int(s["ledgered"]) / total), "settled_pct": round(100 * settled / total),
            "sent": str(s["sent"]), "delivered": str(s["delivered"]), "deferred": str(s["deferred"]),
            "suppressed": suppressed_counts(s["suppressed"]) or "0",
            "failed": str(s["failed"]), "started": when(s["started_at"]), "finished": when(s["finished_at"]),
            "active": "yes" if s["status"] in ("ledgering", "running") else "no"}


class CampaignsState(paging.KeysetPaged, AuthState):
    rows: rx.Field[list[dict[str, Any]]] = rx.field(default_factory=list)
    error: rx.Field[str] = rx.field("")
    notice: rx.Field[str] = rx.field("")
    # The confirmation before a start: what was asked for, and who and what it would cost.
    pending_name: rx.Field[str] = rx.field("")
    pending_summary: rx.Field[str] = rx.field("")
    confirm_error: rx.Field[str] = rx.field("")
    cancel_id: rx.Field[str] = rx.field("")  # the campaign whose cancel is being confirmed ("" = none)
    cancel_title: rx.Field[str] = rx.field("")
    _pending: dict[str, str] = {}  # backend-only: the form as submitted (segment, template, channel, name)
    channel: rx.Field[str] = rx.field(ALL)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)

    @event
    async def load(self) -> Followup:
        """A page load: the channel filter and the position from the URL, then the campaigns."""
        params = self.router.url.query_parameters
        self.channel = params.get("channel", "") if params.get("channel", "") in PEOPLE_CHANNELS else ALL
        before, after = paging.position(params)
        self._before, self._after = before or 0, after or 0
        if not self._tenant_id:
            return None
        await self._query()
        return CampaignsState.follow

    @staticmethod
    def _page(tenant: int, where: tuple[str, int, int]) -> tuple[list[dict[str, Any]], bool, bool]:
        channel, before, after = where
        page = pages.campaigns(tenant, None if channel == ALL else channel, PAGE_SIZE, before or None, after or None)
        return [_row(s) for s in page.rows], page.has_older, page.has_newer

    def _where(self) -> tuple[str, int, int]:
        return self.channel, self._before, self._after

    async def _query(self) -> None:
        if not await self._fresh() or not self._tenant_id:
            return
        self.rows, self.has_older, self.has_newer = await asyncio.to_thread(self._page, self._tenant_id, self._where())

    def _url(self) -> Followup:
        return paging.replace_url(routes.CAMPAIGNS, {"channel": "" if self.channel == ALL else self.channel,
                                                     "before": self._before, "after": self._after})

    @event
    async def set_channel(self, value: str) -> Followup:
        if not self._tenant_id or value not in (ALL, *PEOPLE_CHANNELS):
            return None
        self.channel, self._before, self._after = value, 0, 0
        await self._query()
        return self._url()

    @event(background=True)
    async def follow(self) -> None:
        task = await LiveTask.start(self)
        tenant = task.tenant
        if not tenant:
            return
        while await task.wait(REFRESH_SECONDS):  # the page's refresh period while it is open
            async with self:
                if not task.still_mine():
                    return
                where = self._where()
            rows, older, newer = await task.read(asyncio.to_thread(self._page, tenant, where))
            async with self:
                if not task.still_mine():
                    return
                if self._where() == where:  # else: the operator moved meanwhile
                    self.rows, self.has_older, self.has_newer = rows, older, newer

    @event
    async def preview(self, form: dict[str, str]) -> None:
        """Step one of a start: say to how many people and at most at what cost, and ask for a note."""
        self.error = self.notice = self.confirm_error = ""
        if not await self._allowed(Act.MESSAGES):
            self.error = refusal(Act.MESSAGES)
            return
        name = str(form.get("name", "")).strip()[:100]
        if not name:
            self.error = "Give the campaign a name."
            return
        segment, channel = str(form.get("segment", "")), str(form.get("channel", ""))
        p = await asyncio.to_thread(campaign_views.preview, self._tenant_id, segment, channel)
        if p is None:
            self.error = f"No segment {segment!r}."
            return
        self._pending = {"name": name, "segment": segment, "channel": channel,
                         "template": str(form.get("template", ""))}
        self.pending_name = name
        self.pending_summary = (f"“{form.get('template', '')}” by {channel} to {p['audience']:,} people "
                                f"({segment}: {segments.DESCRIPTIONS.get(segment, '').rstrip('.').lower()}), "
                                f"estimated cost up to {money(p['cost_cents'])} "
                                f"({money(p['price_cents'])} each; suppressed messages are refunded).")

    @event
    def close_confirm(self) -> None:
        self.pending_name, self._pending = "", {}

    @event
    async def create(self, form: dict[str, str]) -> None:
        """Step two: start what was previewed, the note kept with who started it."""
        self.error = self.notice = self.confirm_error = ""
        if not await self._allowed(Act.MESSAGES):
            self.error, self.pending_name = refusal(Act.MESSAGES), ""
            return
        pending, note = dict(self._pending), str(form.get("note", "")).strip()[:500]
        if not pending:
            return
        if not note:
            self.confirm_error = "Say why: the note is kept with your name."
            return
        self.pending_name, self._pending = "", {}
        try:
            cid = await asyncio.to_thread(lambda: campaign_fan_out.create(
                tenant_id=self._tenant_id, name=pending["name"], segment=pending["segment"],
                template=pending["template"], channel=pending["channel"], actor_ref=self._actor_ref, note=note))
        except SendRefused as exc:
            self.error = str(exc)
            return
        await wake_fan_out(await live.arq(), cid)
        self.notice = f"Campaign {cid} started: its messages are being written to the ledger."
        await self._query()

    @event
    async def ask_cancel(self, cid: str) -> None:
        """Step one of a cancel: say what it does (it cannot be undone) and ask for a note."""
        self.error = self.notice = self.confirm_error = ""
        campaign_id = parse_id(cid)
        if campaign_id is None:
            return
        if not await self._allowed(Act.MESSAGES):
            self.error = refusal(Act.MESSAGES)
            return
        row = next((r for r in self.rows if str(r.get("id")) == str(campaign_id)), None)
        name = f"#{campaign_id} {row['name']}" if row else f"#{campaign_id}"
        self.cancel_title = (f"Cancel campaign {name}? Every message of it not yet sent is suppressed and refunded; "
                             "this cannot be undone.")
        self.cancel_id = str(campaign_id)

    @event
    def close_cancel(self) -> None:
        self.cancel_id = ""

    @event
    async def cancel(self, form: dict[str, str]) -> None:
        """Step two: the cancel, with the note kept with who cancelled (one audit row, same transaction)."""
        self.error = self.notice = self.confirm_error = ""
        campaign_id = parse_id(self.cancel_id)
        if campaign_id is None:
            return
        if not await self._allowed(Act.MESSAGES):
            self.error, self.cancel_id = refusal(Act.MESSAGES), ""
            return
        note = str(form.get("note", "")).strip()[:500]
        if not note:
            self.confirm_error = "Say why: the note is kept with your name."
            return
        self.cancel_id = ""
        tenant, actor = self._tenant_id, self._actor_ref
        n = await asyncio.to_thread(lambda: campaign_fan_out.cancel(tenant, campaign_id, actor_ref=actor, note=note))
        self.notice = ("No such campaign." if n is None else
                       f"Campaign {campaign_id} cancelled: {n} owed messages suppressed (and refunded).")
        await self._query()


def _bar(label: str, pct: rx.Var[int]) -> rx.Component:
    return rx.hstack(rx.text(label, size="1", width="64px"), rx.progress(value=pct, width="140px"),
                     rx.text(pct, "%", size="1"), spacing="2", align="center")


def _campaign_row(c: ObjectVar[dict[str, Any]]) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.vstack(rx.link(rx.text("#", c["id"], " ", c["name"], weight="bold"),
                                        href="/campaigns/" + c["id"].to(str), data_testid="campaign-link"),
                                caption(c["what"]), spacing="0")),
        rx.table.cell(rx.badge(c["status"], variant="soft", data_testid="campaign-status")),
        rx.table.cell(rx.vstack(_bar("ledgered", c["ledgered_pct"]), _bar("settled", c["settled_pct"]),
                                spacing="1")),
        rx.table.cell(rx.text(c["sent"], " / ", c["total"], data_testid="campaign-sent")),
        rx.table.cell(c["delivered"]), rx.table.cell(c["deferred"]),
        rx.table.cell(rx.text(c["suppressed"], size="1")), rx.table.cell(c["failed"]),
        rx.table.cell(rx.text(c["started"], size="1")),
        rx.table.cell(rx.cond((c["active"] == "yes") & CampaignsState.may_change,
                              action_button("Cancel", size="1", color_scheme="red", variant="soft",
                                            on_click=CampaignsState.ask_cancel(c["id"]),
                                            data_testid="campaign-cancel"))),
        data_testid="campaign-row")


def _note_dialog(title: Any, summary: Any, open_: Any, on_submit: Any, on_close: Any, *, keep: str, act: str,
                 testid: str, danger: bool = False) -> rx.Component:
    """A campaign action asked before it happens (`components.note_dialog`). Test ids: `<testid>-summary`, `-note`,
    `-confirm`, `-dialog`."""
    return note_dialog(title, summary, open_=open_, on_submit=on_submit, on_keep=on_close, keep=keep, act=act,
                       error=CampaignsState.confirm_error, act_colour="red" if danger else None,
                       ids={"summary": f"{testid}-summary", "note": f"{testid}-note", "act": f"{testid}-confirm",
                            "dialog": f"{testid}-dialog"})


def _confirm_start() -> rx.Component:
    return _note_dialog(rx.text("Start “", CampaignsState.pending_name, "”?"), CampaignsState.pending_summary,
                        CampaignsState.pending_name != "", CampaignsState.create, CampaignsState.close_confirm,
                        keep="Cancel", act="Start campaign", testid="campaign")


def _confirm_cancel() -> rx.Component:
    return _note_dialog("Cancel this campaign?", CampaignsState.cancel_title, CampaignsState.cancel_id != "",
                        CampaignsState.cancel, CampaignsState.close_cancel, keep="Keep it running",
                        act="Cancel campaign", testid="campaign-cancel", danger=True)


def campaigns_page() -> rx.Component:
    return shell(
        "Campaigns",
        rx.cond((CampaignsState.role != "") & ~CampaignsState.may_change, rx.callout(
            "Read-only: your role sees every campaign and its progress, but cannot start or cancel one.",
            icon="eye", color_scheme="gray", width="100%", margin_bottom="12px", data_testid="campaigns-read-only")),
        card(action_form(rx.flex(
            rx.vstack(rx.text("Name", size="1"), rx.input(name="name", placeholder="Winter offer",
                                                          data_testid="campaign-name"), spacing="1"),
            rx.vstack(rx.text("Who (segment)", size="1"),
                      rx.select(list(segments.SEGMENTS), name="segment", default_value="all_reachable"), spacing="1"),
            rx.vstack(rx.text("Template", size="1"), rx.select(["offer"], name="template",
                                                               default_value="offer"), spacing="1"),
            rx.vstack(rx.text("Channel", size="1"), rx.select(list(PEOPLE_CHANNELS), name="channel",
                                                              default_value="email"), spacing="1"),
            action_button("Start campaign", type="submit", disabled=~CampaignsState.may_change,
                      data_testid="campaign-start"),
            gap="12px", align="end", wrap="wrap"), on_submit=CampaignsState.preview),
            # What each segment selects, in words beside the choice (the select shows only its name).
            rx.vstack(*[caption(rx.text.strong(name), ": ", text)
                        for name, text in segments.DESCRIPTIONS.items()],
                      spacing="0", margin_top="10px", data_testid="segment-descriptions"),
            margin_bottom="12px"),
        _confirm_start(),
        _confirm_cancel(),
        secondary("Campaigns ride the bulk lane, paced by its token bucket: they never delay a one-time code on "
                  "the critical lane. Quiet hours defer them to each person's morning.", margin_bottom="8px"),
        rx.cond(CampaignsState.notice != "", rx.callout(CampaignsState.notice, icon="check", width="100%",
                                                         data_testid="campaign-notice")),
        error_callout(CampaignsState.error),
        rx.hstack(rx.select([ALL, *PEOPLE_CHANNELS], value=CampaignsState.channel, on_change=CampaignsState.set_channel,
                            size="1", data_testid="campaign-channel-filter"),
                  paging.pager(CampaignsState.older, CampaignsState.newer, CampaignsState.has_older,
                               CampaignsState.has_newer, "campaigns-pager"), width="100%", align="center"),
        data_table(["Campaign", "Status", "Progress", "Sent", "Delivered", "Deferred", "Suppressed", "Failed",
                    "Started (UTC)", ""], CampaignsState.rows, _campaign_row, "No campaigns yet.", "campaigns-table"),
    )


PAGE = Page(routes.CAMPAIGNS, campaigns_page, "Campaigns · Outbox", [AuthState.require_login, CampaignsState.load],
            ("Campaigns", "megaphone"))

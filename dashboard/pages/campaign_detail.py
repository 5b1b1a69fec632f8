"""One campaign: its progress (ledgered, sent, delivered, deferred, suppressed by reason, failed) and its messages,
a keyset page at a time (older / newer), each linked to its own page. The page position is in the URL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import reflex as rx

from dashboard import paging, routes
from dashboard.components import (
    Row,
    caption,
    card,
    data_table,
    empty_state,
    secondary,
    shell,
    stat,
    status_badge,
)
from dashboard.events import Followup, event
from dashboard.format import notification, parse_id, when
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access import actions as operator_actions
from domain.campaigns import views as campaign_views
from domain.ledger.reasons import suppressed_counts
from domain.support.pages import campaign_messages

PAGE_SIZE = 50


class CampaignDetailState(AuthState):
    found: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    cid: rx.Field[int] = rx.field(0)
    name: rx.Field[str] = rx.field("")
    what: rx.Field[str] = rx.field("")
    status: rx.Field[str] = rx.field("")
    counts: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    suppressed: rx.Field[str] = rx.field("")
    started: rx.Field[str] = rx.field("")
    finished: rx.Field[str] = rx.field("")
    rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    history: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)  # who started it, who cancelled it
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)

    @event
    async def load(self) -> None:
        cid = parse_id(self.router.page.params.get("campaign_id", ""))
        before, after = paging.position(self.router.url.query_parameters)
        await self._show(cid, before, after)

    async def _show(self, cid: int | None, before: int | None, after: int | None) -> None:
        self.found, self.loaded = False, False
        if cid is None or not await self._fresh() or not self._tenant_id:
            self.loaded = True
            return
        tenant = self._tenant_id
        s, page, done = await asyncio.gather(
            asyncio.to_thread(campaign_views.status, tenant, cid),
            asyncio.to_thread(campaign_messages, tenant, cid, PAGE_SIZE, before, after),
            asyncio.to_thread(operator_actions.on_target, tenant, f"campaign {cid}"))
        self.loaded = True
        if s is None:  # missing, or another tenant's
            return
        self.found, self.cid, self.name, self.status = True, cid, s["name"], s["status"]
        self.what = f"{s['segment']} × {s['template']} by {s['channel']}"
        self.counts = [{"label": k.capitalize(), "value": str(s[k])}
                       for k in ("total", "ledgered", "queued", "sent", "delivered", "deferred", "failed")]
        self.suppressed = suppressed_counts(s["suppressed"]) or "nothing suppressed"
        self.started, self.finished = when(s["started_at"]), when(s["finished_at"])
        self.rows = [notification(n) for n in page.rows]
        self.history = [{"what": {"campaign start": "Started", "campaign cancel": "Cancelled"}.get(a["action"],
                                                                                                  a["action"]),
                         "who": str(a["actor_ref"]).split(":", 1)[-1], "at": when(a["at"]),
                         "note": a["note"] or "(no note)"} for a in done]
        self.has_older, self.has_newer = page.has_older, page.has_newer

    def _url(self, before: int | None, after: int | None) -> str:
        return paging.url(f"/campaigns/{self.cid}", {"before": before, "after": after})

    @event
    async def older(self) -> Followup:
        if not self.rows:
            return None
        before = int(self.rows[-1]["id"])
        await self._show(self.cid, before, None)
        return rx.call_script(f"window.history.replaceState(null, '', {json.dumps(self._url(before, None))})")

    @event
    async def newer(self) -> Followup:
        if not self.rows:
            return None
        after = int(self.rows[0]["id"])
        await self._show(self.cid, None, after)
        return rx.call_script(f"window.history.replaceState(null, '', {json.dumps(self._url(None, after))})")


def _row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link("#" + n["id"].to(str), href="/messages/" + n["id"].to(str), data_testid="message-link")),
        rx.table.cell(rx.text(n["created"], size="1")), rx.table.cell(n["recipient"]),
        rx.table.cell(rx.vstack(status_badge(n["status"]), rx.cond(n["reason"] != "", caption(n["reason"])),
                                spacing="1")),
        rx.table.cell(n["attempts"]), rx.table.cell(n["cost"]), data_testid="campaign-message-row")


def _count(c: Any) -> rx.Component:
    return stat(c["label"], c["value"])


def campaign_detail_page() -> rx.Component:
    return shell(
        "Campaign",
        rx.cond(
            CampaignDetailState.found,
            rx.vstack(
                card(rx.hstack(rx.heading(CampaignDetailState.name, size="5", data_testid="campaign-name"),
                               status_badge(CampaignDetailState.status), align="center", spacing="3"),
                     secondary(CampaignDetailState.what),
                     rx.text("Started " + CampaignDetailState.started + " · finished " + CampaignDetailState.finished
                             + " (UTC) · " + CampaignDetailState.suppressed, size="1",
                             data_testid="campaign-summary")),
                rx.cond(CampaignDetailState.history.length() > 0, card(rx.foreach(
                    CampaignDetailState.history,
                    lambda h: rx.text(h["what"], " by ", rx.text.strong(h["who"]), " at ", h["at"], " UTC: ",
                                      h["note"], size="2", data_testid="campaign-history")))),
                rx.flex(rx.foreach(CampaignDetailState.counts, _count), gap="12px", wrap="wrap", width="100%"),
                rx.heading("Messages", size="4"),
                paging.pager(CampaignDetailState.older, CampaignDetailState.newer, CampaignDetailState.has_older,
                             CampaignDetailState.has_newer, "campaign-pager"),
                data_table(["Message", "Created (UTC)", "Recipient", "Status", "Attempts", "Cost"],
                           CampaignDetailState.rows, _row, "No messages on this page.", "campaign-messages"),
                rx.link("← every campaign", href=routes.CAMPAIGNS, size="2"),
                spacing="3", width="100%", align="start"),
            rx.cond(CampaignDetailState.loaded, empty_state("No such campaign for your tenant."), rx.spinner()),
        ),
    )


PAGE = Page(routes.CAMPAIGN_DETAIL, campaign_detail_page, "Campaign · Outbox",
            [AuthState.require_login, CampaignDetailState.load])

"""Journeys: each lead's furthest step, its one live nudge, and the history of every nudge we scheduled,
superseded or sent — with a way to record a funnel or lifecycle event by hand."""

from __future__ import annotations

import asyncio

import reflex as rx

from dashboard import paging, routes
from dashboard.components import Row, caption, card, data_table, lookup, secondary, shell, status_badge
from dashboard.events import Followup
from dashboard.events import event as handler  # this state has vars named `event` and `events`
from dashboard.format import notification, parse_id, search_text, when
from dashboard.link import action_button
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.journeys import store as journey_store
from domain.journeys import views as journey_views
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.ledger.reasons import dropped_text
from domain.support import pages

ALL, PAGE_SIZE = "all", 50
STEPS = (*JOURNEY_STEPS, "none")  # "none": not started

DECISION_TEXT = {"scheduled": "nudge scheduled", "sent_now": "sent now", "dropped": "dropped",
                 "lifecycle": "lifecycle message", "duplicate": "duplicate: first answer returned"}

OUTCOME_TEXT = {
    "scheduled": "Nudge scheduled for {at}; the previous live nudge (if any) was cancelled.",
    "sent_now": "Sent now; the previous live nudge (if any) was cancelled.",
    "dropped": "Dropped: the lead is already at {step}, so this event is late or backward. Nothing changed.",
    "duplicate": "Duplicate: this event was already recorded; its first answer stands.",
    "lifecycle": "Lifecycle message sent; the journey nudge was left alone.",
    "unknown_event": "Unknown event.",
    "not_found": "No such lead for your tenant.",
}


class JourneysState(paging.KeysetPaged, AuthState):
    leads: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    selected: rx.Field[int] = rx.field(0)
    intents: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    messages: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    events: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    event: rx.Field[str] = rx.field(JOURNEY_STEPS[0])
    result: rx.Field[str] = rx.field("")
    query: rx.Field[str] = rx.field("")
    step: rx.Field[str] = rx.field(ALL)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)

    @handler
    async def load(self) -> None:
        """A page load: the search, the step filter and the position from the URL, then the leads."""
        params = self.router.url.query_parameters
        self.query = search_text(params.get("q", ""), 64)
        self.step = params.get("step", "") if params.get("step", "") in STEPS else ALL
        before, after = paging.position(params)
        self._before, self._after = before or 0, after or 0
        await self.refresh()

    def _page_rows(self) -> list[dict[str, str]]:
        return self.leads

    async def _page_reload(self) -> None:
        await self.refresh()

    def _url(self) -> Followup:
        return paging.replace_url(routes.JOURNEYS, {"q": self.query.strip(),
                                                    "step": "" if self.step == ALL else self.step,
                                                    "before": self._before, "after": self._after})

    @handler
    async def search(self, form: dict[str, str]) -> Followup:
        self.query, self._before, self._after = search_text(form.get("q", ""), 64), 0, 0
        await self.refresh()
        return self._url()

    @handler
    async def set_step(self, value: str) -> Followup:
        if value not in (ALL, *STEPS):
            return None
        self.step, self._before, self._after = value, 0, 0
        await self.refresh()
        return self._url()

    @handler
    async def refresh(self) -> None:
        """The leads at the position and filters the view holds (the URL is not read again)."""
        if not await self._fresh() or not self._tenant_id:
            return
        page = await asyncio.to_thread(pages.leads, self._tenant_id, self.query.strip(),
                                       None if self.step == ALL else self.step, PAGE_SIZE, self._before or None,
                                       self._after or None)
        rows, self.has_older, self.has_newer = page.rows, page.has_older, page.has_newer
        self.leads = [{
            "id": str(r["id"]), "recipient": r["recipient_ref"], "advisor": r["advisor_ref"] or "—",
            "step": r["current_step"] or "—",
            "progress": f"{JOURNEY_STEPS.index(r['current_step']) + 1 if r['current_step'] else 0} of "
                        f"{len(JOURNEY_STEPS)} steps",
            "live": f"{r['live_step']} · {r['live_status']}" if r["live_step"] else "none",
            "due": when(r["live_scheduled_for"]), "intents": str(r["intents"]),
        } for r in rows]
        if self.selected:
            await self._detail()

    async def _detail(self) -> None:
        d = await asyncio.to_thread(journey_views.lead_detail, self._tenant_id, self.selected)
        if d is None:
            self.selected, self.intents, self.messages = 0, [], []
            return
        self.intents = [{"id": str(i["id"]), "step": i["step"], "status": i["status"], "why": i["why"],
                         "due": when(i["scheduled_for"]), "created": when(i["created_at"])} for i in d["intents"]]
        self.messages = [{**notification(n), "intent": f"#{n['intent_id']}" if n.get("intent_id") else "lifecycle"}
                         for n in d["notifications"]]
        self.events = [{"at": when(e["received_at"]), "event": e["event"], "id": e["event_id"],
                        "decision": DECISION_TEXT.get(e["outcome"] or "", e["outcome"] or "")
                        + (f": {dropped_text(e['reason'])}" if e["reason"] else "")} for e in d["events"]]

    @handler
    async def select(self, lead_id: str) -> None:
        lid = parse_id(lead_id)
        if not self._tenant_id or lid is None:
            return
        self.selected, self.result = lid, ""
        await self._detail()

    @handler
    def set_event(self, value: str) -> None:
        if value in JOURNEY_STEPS or value in LIFECYCLE_EVENTS:
            self.event = value

    @handler
    async def record(self) -> Followup:
        if not self.selected:
            return None
        if not await self._allowed(Act.MESSAGES):
            self.result = refusal(Act.MESSAGES)
            return None
        r = await asyncio.to_thread(journey_store.record_lead_event, self._tenant_id, self.selected, self.event)
        self.result = OUTCOME_TEXT[r.outcome].format(at=when(r.scheduled_for), step=r.current_step)
        return JourneysState.refresh


def _lead_row(r: Row) -> rx.Component:
    return rx.table.row(
        # Selecting a lead fills the panel above; it goes nowhere, so it is a button, not a link to "#".
        rx.table.cell(rx.hstack(rx.button(f"#{r['id']}", on_click=JourneysState.select(r["id"]), variant="ghost",
                                          size="1", weight="bold", data_testid="lead-select",
                                          title="show this lead's nudges here"),
                                rx.link("page →", href="/journeys/" + r["id"], size="1", data_testid="lead-link"),
                                spacing="2", align="center")),
        rx.table.cell(r["recipient"]),
        rx.table.cell(r["advisor"]),
        rx.table.cell(rx.vstack(rx.text(r["step"]), caption(r["progress"]), spacing="0")),
        rx.table.cell(r["live"]),
        rx.table.cell(rx.text(r["due"], size="1")),
        rx.table.cell(r["intents"]),
        data_testid="lead-row",
    )


def _intent_row(i: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.text("#", i["id"])), rx.table.cell(i["step"]),
        rx.table.cell(rx.badge(i["status"], color_scheme=lookup(
            i["status"], {"scheduled": "amber", "pending": "amber", "sent": "green"}, "gray"))),
        rx.table.cell(rx.text(i["why"], size="1", data_testid="intent-why")),
        rx.table.cell(rx.text(i["due"], size="1")), rx.table.cell(rx.text(i["created"], size="1")),
        data_testid="intent-row",
    )


def _event_row(e: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(e["at"], size="1")), rx.table.cell(rx.text(e["event"], weight="medium")),
                        rx.table.cell(rx.text(e["decision"], size="2")),
                        rx.table.cell(rx.code(e["id"], size="1")), data_testid="event-row")


def _message_row(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(n["intent"]),
        rx.table.cell(n["channel"]), rx.table.cell(n["recipient"]), rx.table.cell(rx.text(n["template"], size="1")),
        rx.table.cell(rx.vstack(status_badge(n["status"]), rx.cond(n["reason"] != "", caption(n["reason"])),
                                spacing="1")),
        rx.table.cell(n["attempts"]),
    )


def journeys_page() -> rx.Component:
    return shell(
        "Journeys",
        secondary("Each lead has at most one reminder waiting, for the furthest step it reached — the database "
                  "refuses a second one, even when two events arrive at once. An event older than, or not past, "
                  "the lead's step changes nothing; lifecycle messages never cancel a reminder.",
                  margin_bottom="12px"),
        rx.flex(
            rx.form(rx.hstack(rx.input(name="q", placeholder="lead or advisor ref (cust-003)",
                                       default_value=JourneysState.query, key=JourneysState.query,
                                       data_testid="lead-query"),
                              rx.button("Find", type="submit"), spacing="2"), on_submit=JourneysState.search),
            rx.select([ALL, *STEPS], value=JourneysState.step, on_change=JourneysState.set_step, size="2"),
            gap="12px", wrap="wrap", align="center", margin_bottom="8px",
        ),
        paging.pager(JourneysState.older, JourneysState.newer, JourneysState.has_older, JourneysState.has_newer,
                     "leads-pager"),
        data_table(["Lead", "Applicant", "Advisor", "Furthest step", "Live nudge", "Due (UTC)", "Nudges"],
                   JourneysState.leads, _lead_row, "No leads yet.", "leads-table"),
        rx.cond(JourneysState.selected > 0, card(
            rx.heading(f"Lead #{JourneysState.selected}", size="4"),
            rx.hstack(
                rx.select.root(
                    rx.select.trigger(data_testid="event-select"),
                    rx.select.content(
                        rx.select.group(rx.select.label("Funnel steps"),
                                        *[rx.select.item(s, value=s) for s in JOURNEY_STEPS]),
                        rx.select.separator(),
                        rx.select.group(rx.select.label("Lifecycle"),
                                        *[rx.select.item(s, value=s) for s in LIFECYCLE_EVENTS]),
                    ),
                    value=JourneysState.event, on_change=JourneysState.set_event,
                ),
                action_button("Record event", on_click=JourneysState.record, disabled=~JourneysState.may_change,
                          data_testid="record-event"),
                spacing="2", margin_y="8px",
            ),
            rx.cond(JourneysState.result != "", rx.callout(JourneysState.result, icon="info",
                                                           data_testid="journey-result")),
            rx.heading("Nudges", size="3", margin_top="12px"),
            rx.heading("Events received", size="3", margin_top="12px"),
            data_table(["Received (UTC)", "Event", "Decision", "Event id"], JourneysState.events, _event_row,
                       "No events yet.", "events-table"),
            data_table(["#", "Step", "Status", "Why", "Due (UTC)", "Created (UTC)"], JourneysState.intents,
                       _intent_row, "No nudges yet.", "intents-table"),
            rx.heading("Messages", size="3", margin_top="12px"),
            data_table(["Nudge", "Channel", "Recipient", "Template", "Status", "Attempts"], JourneysState.messages,
                       _message_row, "No messages yet."),
            margin_top="16px",
        )),
    )


PAGE = Page(routes.JOURNEYS, journeys_page, "Journeys · Outbox", [AuthState.require_login, JourneysState.load],
            ("Journeys", "route"))

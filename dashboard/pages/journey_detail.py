"""One lead, on its own page: its furthest step, every nudge with why it ended, the events received with their
decisions, and the messages each produced (each linked to its own page)."""

from __future__ import annotations

import asyncio

import reflex as rx

from dashboard import routes
from dashboard.components import Row, caption, card, data_table, empty_state, shell, status_badge
from dashboard.events import event
from dashboard.format import notification, parse_id, when
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.journeys import views as journey_views
from domain.journeys.steps import JOURNEY_STEPS
from domain.ledger.reasons import dropped_text

DECISION_TEXT = {"scheduled": "nudge scheduled", "sent_now": "sent now", "dropped": "dropped",
                 "lifecycle": "lifecycle message", "duplicate": "duplicate: first answer returned"}


class LeadState(AuthState):
    found: rx.Field[bool] = rx.field(False)
    loaded: rx.Field[bool] = rx.field(False)
    lid: rx.Field[str] = rx.field("")
    applicant: rx.Field[str] = rx.field("")
    advisor: rx.Field[str] = rx.field("")
    step: rx.Field[str] = rx.field("")
    live: rx.Field[str] = rx.field("")
    intents: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    events: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    messages: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)

    @event
    async def load(self) -> None:
        lid = parse_id(self.router.page.params.get("lead_id", ""))
        self.found, self.loaded = False, False
        if lid is None or not await self._fresh() or not self._tenant_id:
            self.loaded = True
            return
        d = await asyncio.to_thread(journey_views.lead_detail, self._tenant_id, lid)
        self.loaded = True
        if d is None:  # missing, or another tenant's
            return
        self.found, self.lid = True, str(lid)
        self.applicant, self.advisor = d["recipient_ref"], d["advisor_ref"] or "—"
        step = d["current_step"]
        self.step = f"{step} ({JOURNEY_STEPS.index(step) + 1} of {len(JOURNEY_STEPS)})" if step in JOURNEY_STEPS \
            else (step or "no step yet")
        li = d["live_intent"]
        self.live = f"{li['step']} · {li['why']}" if li else "none"
        self.intents = [{"id": str(i["id"]), "step": i["step"], "status": i["status"], "why": i["why"],
                         "due": when(i["scheduled_for"])} for i in d["intents"]]
        self.events = [{"at": when(e["received_at"]), "event": e["event"], "id": e["event_id"],
                        "decision": DECISION_TEXT.get(e["outcome"] or "", e["outcome"] or "")
                        + (f": {dropped_text(e['reason'])}" if e["reason"] else "")} for e in d["events"]]
        self.messages = [{**notification(n), "intent": f"nudge #{n['intent_id']}" if n.get("intent_id")
                          else "lifecycle"} for n in d["notifications"]]


def _intent(i: Row) -> rx.Component:
    return rx.table.row(rx.table.cell("#" + i["id"].to(str)), rx.table.cell(i["step"]),
                        rx.table.cell(rx.badge(i["status"], variant="soft")),
                        rx.table.cell(rx.text(i["why"], size="1")), rx.table.cell(rx.text(i["due"], size="1")),
                        data_testid="lead-intent-row")


def _event(e: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(e["at"], size="1")), rx.table.cell(e["event"]),
                        rx.table.cell(rx.text(e["decision"], size="2")), rx.table.cell(rx.code(e["id"], size="1")),
                        data_testid="lead-event-row")


def _message(n: Row) -> rx.Component:
    return rx.table.row(
        rx.table.cell(rx.link("#" + n["id"].to(str), href="/messages/" + n["id"].to(str), data_testid="message-link")),
        rx.table.cell(n["intent"]), rx.table.cell(n["channel"]), rx.table.cell(n["recipient"]),
        rx.table.cell(rx.text(n["template"], size="1")),
        rx.table.cell(rx.vstack(status_badge(n["status"]), rx.cond(n["reason"] != "", caption(n["reason"])),
                                spacing="1")),
        data_testid="lead-message-row")


def lead_page() -> rx.Component:
    return shell(
        "Lead",
        rx.cond(
            LeadState.found,
            rx.vstack(
                card(rx.heading("Lead #" + LeadState.lid, size="5", data_testid="lead-id"),
                     rx.text("Applicant " + LeadState.applicant + " · advisor " + LeadState.advisor, size="2"),
                     rx.text("Furthest step: " + LeadState.step, size="2", data_testid="lead-step"),
                     rx.text("Live nudge: " + LeadState.live, size="2", data_testid="lead-live")),
                rx.heading("Nudges", size="4"),
                data_table(["#", "Step", "Status", "Why", "Due (UTC)"], LeadState.intents, _intent,
                           "No nudges yet.", "lead-intents"),
                rx.heading("Events received", size="4"),
                data_table(["Received (UTC)", "Event", "Decision", "Event id"], LeadState.events, _event,
                           "No events yet.", "lead-events"),
                rx.heading("Messages", size="4"),
                data_table(["Message", "For", "Channel", "Recipient", "Template", "Status"], LeadState.messages,
                           _message, "No messages yet.", "lead-messages"),
                rx.link("← every lead", href=routes.JOURNEYS, size="2"),
                spacing="3", width="100%", align="start"),
            rx.cond(LeadState.loaded, empty_state("No such lead for your tenant."), rx.spinner()),
        ),
    )


PAGE = Page(routes.JOURNEY_DETAIL, lead_page, "Lead · Outbox", [AuthState.require_login, LeadState.load])

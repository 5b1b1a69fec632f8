"""One message: who it was for, why it is where it is (in plain words), every attempt (time, outcome, HTTP status,
latency, response excerpt, next retry), the receipt, the charge and any refund, and the envelope it came from
(contact points and secrets redacted)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import reflex as rx

from dashboard import routes
from dashboard.components import Row, caption, card, data_table, empty_state, secondary, shell, status_badge
from dashboard.events import event
from dashboard.format import done_line, money, parse_id, resolved_line, when
from dashboard.pages import Page
from dashboard.state import AuthState
from domain.ledger.reasons import entry_reason
from domain.support.message import archived, message_page

MONEY_KIND = {"reserve": "charged", "refund": "refunded", "adjustment": "adjusted"}


def _attempt(a: dict[str, Any]) -> dict[str, str]:
    return {"no": str(a["attempt_no"]), "at": when(a["started_at"]), "worker": a["worker"],
            "outcome": a["outcome"] + (f" — {a['error_text']}" if a["error_text"] else ""),
            "status": str(a["status_code"]) if a["status_code"] is not None else "—",
            "latency": f"{a['latency_ms']:.0f} ms" if a["latency_ms"] is not None else "—",
            "excerpt": a["response_excerpt"] or "—", "next": when(a["next_attempt_at"])}


def attempts_text(m: dict[str, Any]) -> str:
    """How many tries, in words: a suppressed row was not sent (its one claim that found it may not go out is no
    try at sending); an owed row not tried yet says so. Pure."""
    if m["status"] == "SUPPRESSED":
        return "not sent"
    if not m["attempts"]:
        return f"none yet (at most {m['max_attempts']})"
    return f"{m['attempts']} of at most {m['max_attempts']}"


def receipt_text(m: dict[str, Any]) -> str:
    """The provider's receipt in words; nothing for a message that never went out (no receipt is owed). Pure."""
    r = m["receipt"]
    if r:
        return f"{r['provider']} receipt: {r['outcome']} at {when(r['received_at'])} UTC"
    if m["sent_at"] is None:
        return ""
    return "webhooks have no receipt: the 2xx is the delivery" if m["channel"] == "webhook" else "no receipt yet"


def _facts(m: dict[str, Any]) -> list[dict[str, str]]:
    """The header as label/value/link rows (a link only where there is a page for it)."""
    rows = [
        ("Recipient", f"{m['recipient_name'] or m['recipient']} ({m['recipient']})",
         f"/recipients/{m['recipient_id']}" if m["recipient_id"] else ""),
        ("Channel · lane", f"{m['channel']} · {m['lane']}", ""),
        # The version it was rendered with at send time; a row never rendered (never sent) has none to name.
        ("Template", f"{m['template']} v{m['template_version']}" if m["template_version"] else m["template"], ""),
        ("Created", when(m["created_at"]), ""), ("Sent", when(m["sent_at"]), ""),
        ("Settled", when(m["settled_at"]), ""),
        # While owed, from what holds it ("when the lane is resumed"), never a due time already past.
        ("Next try", m["state"]["next_try"] if m["state"] else when(m["next_retry_at"]), ""),
        ("Attempts", attempts_text(m), ""),
        ("Provider reference", m["provider_reference"] or "—", ""),
        ("Job id", m["job_id"] or "—", ""),
        ("Order", str(m["order_id"]) if m["order_id"] else "—", f"/orders/{m['order_id']}" if m["order_id"] else ""),
        ("Event", str(m["event_id"]) if m["event_id"] else "—", f"/audit?q={m['event_id']}" if m["event_id"] else ""),
        ("Campaign", f"{m['campaign_name']} (#{m['campaign_id']})" if m["campaign_id"] else "—",
         f"/campaigns/{m['campaign_id']}" if m["campaign_id"] else ""),
        ("Journey", f"lead {m['lead_id']}" if m["lead_id"] else "—",
         f"/journeys/{m['lead_id']}" if m["lead_id"] else ""),
    ]
    return [{"label": k, "value": v, "href": h} for k, v, h in rows]


class MessageState(AuthState):
    found: rx.Field[bool] = rx.field(False)
    gone: rx.Field[str] = rx.field("")  # "Message #9 was archived on … in file …" ("" = not archived)
    loaded: rx.Field[bool] = rx.field(False)
    mid: rx.Field[str] = rx.field("")
    status: rx.Field[str] = rx.field("")
    answer: rx.Field[str] = rx.field("")
    reason: rx.Field[str] = rx.field("")
    resolved: rx.Field[str] = rx.field("")  # "Resolved by hand by pat at …: note" ("" = not resolved)
    replayed: rx.Field[str] = rx.field("")  # "Replayed by bob at … UTC: receiver fixed" ("" = never replayed)
    facts: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    attempts: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    money_rows: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    money_summary: rx.Field[str] = rx.field("")
    receipt: rx.Field[str] = rx.field("")
    envelope: rx.Field[str] = rx.field("")
    payload: rx.Field[str] = rx.field("")
    body: rx.Field[str] = rx.field("")  # the text as rendered at send time, codes masked ("" = never sent)
    body_title: rx.Field[str] = rx.field("")

    @event
    async def load(self) -> None:
        mid = parse_id(self.router.page.params.get("message_id", ""))
        self.found, self.loaded, self.gone = False, False, ""
        if mid is None or not await self._fresh() or not self._tenant_id:
            self.loaded = True
            return
        m = await asyncio.to_thread(message_page, self._tenant_id, mid, datetime.now(UTC))
        if m is None:  # its month archived says where it went; missing and another tenant's read the same
            gone = await asyncio.to_thread(archived, self._tenant_id, mid)
            self.gone = gone["answer"] if gone else ""
        self.loaded = True
        if m is None:
            return
        self.found, self.mid, self.status, self.answer = True, str(mid), m["status"], m["answer"]
        self.reason = m["reason"]
        self.resolved = resolved_line(m["resolved_by"])
        self.replayed = done_line("Replayed (same event id)", m["replayed_by"])
        self.facts = _facts(m)
        self.attempts = [_attempt(a) for a in m["attempt_log"]]
        mo = m["money"]
        self.money_rows = [{"at": when(e["created_at"]), "what": MONEY_KIND.get(e["kind"], e["kind"]),
                            "amount": money(abs(e["amount_cents"])), "why": entry_reason(e["reason"])}
                           for e in mo["entries"]]
        self.money_summary = (f"charged {money(mo['charged_cents'])} · refunded {money(mo['refunded_cents'])} · "
                              f"held now {money(mo['held_cents'])}") if mo["entries"] else "nothing charged"
        self.receipt = receipt_text(m)
        self.body = m["body"] or ""
        self.body_title = ("What they received (one-time codes hidden)" if m["status"] in ("SENT", "DELIVERED")
                           else "What was sent (not confirmed received; one-time codes hidden)")
        env = m["envelope"]
        self.envelope = json.dumps(env, default=str, indent=2) if env else ""
        self.payload = json.dumps(m["payload"], default=str, indent=2)


def _fact(f: Row) -> rx.Component:
    return rx.hstack(caption(f["label"], min_width="140px"),
                     rx.cond(f["href"] != "", rx.link(f["value"], href=f["href"], size="2"),
                             rx.text(f["value"], size="2")),
                     spacing="3", align="center", width="100%", data_testid="message-fact")


def _attempt_row(a: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(a["no"]), rx.table.cell(rx.text(a["at"], size="1")),
                        rx.table.cell(a["outcome"]), rx.table.cell(a["status"]), rx.table.cell(a["latency"]),
                        rx.table.cell(rx.code(a["excerpt"], size="1")), rx.table.cell(rx.text(a["next"], size="1")),
                        rx.table.cell(rx.text(a["worker"], size="1")), data_testid="attempt-row")


def _money_row(e: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(e["at"], size="1")), rx.table.cell(e["what"]),
                        rx.table.cell(e["amount"]), rx.table.cell(rx.text(e["why"], size="1")),
                        data_testid="money-row")


def _pre(text: rx.Var[str], testid: str) -> rx.Component:
    return rx.box(rx.el.pre(text, style={"white-space": "pre-wrap", "word-break": "break-all", "margin": "0"}),
                  font_size="12px", padding="10px", background=rx.color("gray", 3), border_radius="6px",
                  width="100%", overflow_x="auto", data_testid=testid)


def message_page_view() -> rx.Component:
    return shell(
        "Message",
        rx.cond(
            MessageState.found,
            rx.vstack(
                card(rx.hstack(rx.heading("#" + MessageState.mid, size="5", data_testid="message-id"),
                               status_badge(MessageState.status), align="center", spacing="3"),
                     rx.text(MessageState.answer, size="3", weight="medium", margin_top="6px",
                             data_testid="message-answer"),
                     rx.cond(MessageState.resolved != "", rx.callout(MessageState.resolved, icon="check",
                                                                     color_scheme="gray", size="1", margin_top="6px",
                                                                     data_testid="message-resolved")),
                     rx.cond(MessageState.replayed != "", caption(MessageState.replayed, margin_top="6px",
                                                                   data_testid="message-replayed")),
                     rx.cond(MessageState.reason != "", secondary(MessageState.reason, data_testid="message-reason")),
                     rx.vstack(rx.foreach(MessageState.facts, _fact), spacing="1", margin_top="10px", width="100%")),
                rx.heading("Attempts", size="4"),
                data_table(["#", "Started (UTC)", "Outcome", "HTTP", "Latency", "Response", "Next retry", "Worker"],
                           MessageState.attempts, _attempt_row, "No attempt yet.", "attempts-table"),
                rx.heading("Money", size="4"),
                rx.text(MessageState.money_summary, size="2", data_testid="money-summary"),
                data_table(["When (UTC)", "What", "Amount", "Why"], MessageState.money_rows, _money_row,
                           "No balance entry for this message.", "money-table"),
                rx.cond(MessageState.receipt != "",
                        rx.fragment(rx.heading("Receipt", size="4"),
                                    rx.text(MessageState.receipt, size="2", data_testid="message-receipt"))),
                rx.cond(MessageState.body != "",
                        rx.fragment(rx.heading(MessageState.body_title, size="4"),
                                    _pre(MessageState.body, "message-body"))),
                rx.cond(MessageState.envelope != "",
                        rx.fragment(rx.heading("Envelope (redacted)", size="4"),
                                    _pre(MessageState.envelope, "message-envelope"))),
                rx.heading("Payload (redacted)", size="4"),
                _pre(MessageState.payload, "message-payload"),
                spacing="3", width="100%", align="start",
            ),
            rx.cond(MessageState.loaded,
                    rx.cond(MessageState.gone != "",
                            card(rx.text(MessageState.gone, data_testid="message-archived")),
                            empty_state("No such message for your tenant.")),
                    rx.spinner()),
        ),
    )


PAGE = Page(routes.MESSAGE_DETAIL, message_page_view, "Message · Outbox", [AuthState.require_login, MessageState.load])

"""Webhook endpoints: the tenant's endpoints (URL, event types, enabled — or why not —, rotation under way, circuit
breaker, health from the attempts: success rate over 24 h, last success, last error); on-call adds one (its
`whsec_…` secret shown once, in that answer only), disables, enables, rotates (the new secret shown once; both sign
for 24 h) and deletes, each after a confirmation that says what follows and asks why (one audit row each; the
row's last action shows who did it). "Send test event" sends a signed `outbox.test` to one enabled endpoint through
the real delivery path (domain/orders/trial.py: one owed at a time, one audit row); each row shows its latest
attempts in plain words (`reasons.attempt_text`, the message page's mapping too), followed live until the test's
first answer. The add form takes the event types (the API's check); the secret has a copy button; the docs link is
the API docs page the dashboard serves. In development an endpoint pointed at the mock receiver has its secret
handed to the mock (domain/endpoints/mock.py). Every handler asks `_allowed(Act.ENDPOINTS)` itself and acts on the
session's tenant only. The URL guard is the API's (domain/endpoints/urls.py)."""

from __future__ import annotations

import asyncio
import time

import reflex as rx

from dashboard import live, paging, routes
from dashboard.api.docs import DOCS_URL
from dashboard.api.endpoints import EVENTS, event_types_problem
from dashboard.components import (
    NOTE_MAX,
    Row,
    caption,
    card,
    data_table,
    error_callout,
    note_dialog,
    pick,
    secondary,
    shell,
)
from dashboard.events import Followup, event
from dashboard.format import parse_id
from dashboard.link import action_button, action_form
from dashboard.pages import Page
from dashboard.pages.endpoints_words import CONFIRM, LABEL, read_rows
from dashboard.state import AuthState
from domain.access.roles import Act, refusal
from domain.delivery.wakeups import enqueue_after_commit
from domain.endpoints import mock, store, urls
from domain.orders import trial

# After "Send test event", the page follows the test until its first answer (or this long).
WATCH_SECONDS, WATCH_EVERY_S = 60.0, 0.5
# The endpoints section of the API docs page the dashboard serves.
DOCS_LINK = f"{DOCS_URL}#/webhook%20endpoints"


class EndpointsState(paging.KeysetPaged, AuthState):
    endpoints: rx.Field[list[dict[str, str]]] = rx.field(default_factory=list)
    has_older: rx.Field[bool] = rx.field(False)
    has_newer: rx.Field[bool] = rx.field(False)
    secret: rx.Field[str] = rx.field("")  # a secret just created or rotated: cleared by the next load or action
    # The confirmation of disable, enable, rotate or delete: which, on which endpoint, in words, and its error.
    confirm_action: rx.Field[str] = rx.field("")
    confirm_id: rx.Field[str] = rx.field("")
    confirm_title: rx.Field[str] = rx.field("")
    confirm_text: rx.Field[str] = rx.field("")
    confirm_error: rx.Field[str] = rx.field("")
    confirm_label: rx.Field[str] = rx.field("")  # the dialog's button: "Delete", "Rotate secret", …
    notice: rx.Field[str] = rx.field("")
    error: rx.Field[str] = rx.field("")
    _watching: int = 0  # the endpoint whose test the page follows (watch_test)
    _watch_running: bool = False  # a watch_test loop runs for this tab

    def _clear(self) -> None:
        self.secret = self.notice = self.error = ""

    async def _reload(self) -> None:
        """The page at the position the view holds (newest first)."""
        if not await self._fresh() or not self._tenant_id:
            return
        self.endpoints, self.has_older, self.has_newer = await asyncio.to_thread(
            read_rows, self._tenant_id, self._before, self._after)

    def _page_rows(self) -> list[dict[str, str]]:
        return self.endpoints

    async def _page_reload(self) -> None:
        await self._reload()

    def _url(self) -> Followup:
        return paging.replace_url(routes.ENDPOINTS, {"before": self._before, "after": self._after})

    @event
    async def load(self) -> None:
        self._clear()
        self.confirm_action = self.confirm_id = self.confirm_error = ""
        before, after = paging.position(self.router.url.query_parameters)
        self._before, self._after = before or 0, after or 0
        if not self._tenant_id:
            self.endpoints = []
            return
        await self._reload()

    async def _may(self) -> bool:
        if await self._allowed(Act.ENDPOINTS) and self._tenant_id:
            return True
        self.error = refusal(Act.ENDPOINTS)
        return False

    @event
    async def create(self, form: dict[str, str]) -> None:
        self._clear()
        if not await self._may():
            return
        url, description = str(form.get("url", "")).strip(), str(form.get("description", "")).strip()[:200]
        # The event-type boxes: none ticked is every type (as the API's omitted list); the API's check decides.
        picked = [t for t in EVENTS if str(form.get(f"type:{t}", "")).lower() in ("on", "true", t)]
        unknown = [k for k in form if k.startswith("type:") and k[5:] not in EVENTS]
        problem = event_types_problem(picked or None) or (
            f"event_types: each once, from {', '.join(EVENTS)}" if unknown else None)
        if problem:
            self.error = f"Not added: {problem}."
            return
        verdict = await asyncio.to_thread(urls.check, url, urls.dev_allowlist())
        if isinstance(verdict, urls.Refused):
            self.error = f"Not added: the URL {verdict.reason}."
            return
        row = await asyncio.to_thread(store.create, self._tenant_id, url, description, picked or None,
                                      self._actor_ref)
        handed = await asyncio.to_thread(mock.hand_over, self._tenant_id, int(row["id"]), url, row["secret"])
        self.secret, self.notice = row["secret"], (f"Endpoint {row['id']} added. Copy its signing secret now: "
                                                   "it is shown only this once." + _MOCK_TOLD * handed)
        self._before = self._after = 0  # the newest page, where the new endpoint is
        await self._reload()

    @event
    async def ask(self, action: str, endpoint_id: str) -> None:
        """Step one of disable, enable, rotate or delete: say in plain words what it does, and ask why. Nothing
        changes until `confirm`, which asks the role again."""
        self._clear()
        eid = parse_id(endpoint_id)
        if action not in CONFIRM:
            self.error = "Unknown action; nothing was changed."
            return
        if not await self._may():
            return
        if eid is None:
            self.error = "No such endpoint; nothing was changed."
            return
        row = next((e for e in self.endpoints if e["id"] == str(eid)), None)
        name = f"endpoint {eid}" + (f" ({row['url']})" if row else "")
        self.confirm_title = CONFIRM[action][0].format(name=name)
        self.confirm_text, self.confirm_label = CONFIRM[action][1], LABEL[action]
        self.confirm_action, self.confirm_id, self.confirm_error = action, str(eid), ""

    @event
    def keep(self) -> None:
        self.confirm_action = self.confirm_id = self.confirm_error = ""

    @event
    async def confirm(self, form: dict[str, str]) -> None:
        """Step two: the action asked in step one, with its note (one audit row, in the action's transaction).
        Another tenant's endpoint is answered exactly as a missing one."""
        self._clear()
        action, eid = self.confirm_action, parse_id(self.confirm_id)
        if action not in CONFIRM or eid is None:
            self.confirm_action = self.confirm_id = ""
            return
        if not await self._may():
            self.confirm_action = self.confirm_id = ""
            return
        note = str(form.get("note", "") if isinstance(form, dict) else "").strip()
        if not note or len(note) > NOTE_MAX:
            self.confirm_error = f"Say why (1 to {NOTE_MAX} characters): the note is kept with your name."
            return
        self.confirm_action = self.confirm_id = self.confirm_error = ""
        tenant, actor = self._tenant_id, self._actor_ref
        if action in ("disable", "enable"):
            on = action == "enable"
            row = await asyncio.to_thread(lambda: store.set_enabled(tenant, eid, on, actor, note=note))
            if row is None:
                self.error = "No such endpoint; nothing was changed."
            else:
                self.notice = f"Endpoint {eid} {'enabled' if on else 'disabled'}."
        elif action == "rotate":
            row = await asyncio.to_thread(lambda: store.rotate(tenant, eid, actor, note=note))
            if row is None:
                self.error = "No such endpoint; nothing was changed."
            else:
                handed = await asyncio.to_thread(mock.hand_over, tenant, eid, str(row["url"]), row["secret"])
                self.secret = row["secret"]
                self.notice = (f"Endpoint {eid}: new secret below (shown only this once); the old one keeps "
                               "signing for 24 hours." + _MOCK_TOLD * handed)
        else:
            gone = await asyncio.to_thread(lambda: store.delete(tenant, eid, actor, note=note))
            if gone:
                self.notice = f"Endpoint {eid} deleted."
            else:
                self.error = "No such endpoint; nothing was changed."
        await self._reload()

    @event
    async def send_test(self, endpoint_id: str) -> Followup:
        """A signed `outbox.test` event to this endpoint only, through the ledger and the lane workers (one owed
        at a time; one audit row); the page then follows it until its first answer."""
        self._clear()
        eid = parse_id(endpoint_id)
        if not await self._may():
            return None
        if eid is None:
            self.error = "No such endpoint; nothing was sent."
            return None
        tenant, actor = self._tenant_id, self._actor_ref
        await asyncio.to_thread(mock.hand_over_current, tenant, eid)  # development: so the mock verifies it
        got = await asyncio.to_thread(lambda: trial.send_test_event(tenant, eid, actor))
        if isinstance(got, trial.Refused):
            self.error = got.words
            return None
        await enqueue_after_commit(await live.arq(), got.owed)
        self.notice = (f"Test event sent to endpoint {eid} (message {got.notification_id}, event {got.event_id}): "
                       "its outcome shows on the endpoint's row.")
        self._watching = eid
        await self._reload()
        return EndpointsState.watch_test

    @event(background=True)
    async def watch_test(self) -> None:
        """Reads only: the rows reloaded (off the state lock) until the watched test has its first answer — an
        accepted send, or an error it will retry — or WATCH_SECONDS pass. One loop per tab whatever the browser
        sends (a second call while one runs returns at once), and none past the end of the tab's session."""
        async with self:
            if self._watch_running:
                return
            tenant, eid, hashed = self._tenant_id, self._watching, self._session_hash
            self._watch_running = bool(tenant and eid)
        try:
            end = time.monotonic() + WATCH_SECONDS
            while tenant and eid and time.monotonic() < end:
                await asyncio.sleep(WATCH_EVERY_S)
                if await self._session_ended(hashed):  # logged out elsewhere: this tab reads nothing more
                    return
                test = (await asyncio.to_thread(store.latest_tests, tenant, [eid])).get(eid)
                answered = test is None or test["status"] != "QUEUED" or test["last_error_class"] is not None
                async with self:
                    if self._tenant_id != tenant or self._watching != eid:
                        return
                    before, after = self._before, self._after
                rows = await asyncio.to_thread(read_rows, tenant, before, after)
                async with self:
                    if self._tenant_id != tenant or (self._before, self._after) != (before, after):
                        return
                    self.endpoints, self.has_older, self.has_newer = rows
                    if answered:
                        self._watching = 0
                        return
        finally:
            async with self:
                self._watch_running = False


_MOCK_TOLD = " It points at the demo's mock receiver, which was given the secret: a test event verifies there."


def _endpoint_row(e: Row) -> rx.Component:
    actions = rx.hstack(
        rx.cond(e["state"] == "enabled",
                action_button("Disable", size="1", variant="soft", on_click=EndpointsState.ask("disable", e["id"]),
                          data_testid="disable-endpoint"),
                action_button("Enable", size="1", variant="soft", on_click=EndpointsState.ask("enable", e["id"]),
                          data_testid="enable-endpoint")),
        action_button("Rotate secret", size="1", variant="soft", on_click=EndpointsState.ask("rotate", e["id"]),
                  data_testid="rotate-endpoint"),
        action_button("Delete", size="1", variant="soft", color_scheme="red",
                      on_click=EndpointsState.ask("delete", e["id"]), data_testid="delete-endpoint"),
        rx.cond(e["state"] == "enabled",
                action_button("Send test event", size="1", variant="soft", color_scheme="blue",
                              on_click=EndpointsState.send_test(e["id"]), data_testid="test-endpoint")),
        spacing="2", wrap="wrap")
    return rx.table.row(
        rx.table.cell(rx.code(e["url"]), rx.text(e["description"], size="1")), rx.table.cell(e["types"]),
        rx.table.cell(rx.cond(e["state"] == "enabled", rx.badge("enabled", color_scheme="green"),
                              rx.badge("disabled", color_scheme="gray")), rx.text(e["rotating"], size="1"),
                      rx.text(e["why"], size="1", data_testid="endpoint-why"),
                      rx.text(e["breaker"], size="1", color=rx.color("amber", 11), data_testid="endpoint-breaker"),
                      caption(e["done"], data_testid="endpoint-last-action")),
        rx.table.cell(rx.text(e["rate"], size="2", data_testid="endpoint-health"),
                      caption(e["last"]),
                      rx.hstack(rx.text(e["test"], size="1", weight="medium", data_testid="endpoint-test"),
                                rx.cond(e["test_message"] != "",
                                        rx.link("its attempts →", href="/messages/" + e["test_message"], size="1",
                                                data_testid="endpoint-test-message")), spacing="2", wrap="wrap"),
                      caption(e["attempts"], white_space="pre-line", data_testid="endpoint-attempts")),
        rx.table.cell(rx.cond(EndpointsState.oncall, actions)), data_testid="endpoint-row")


def _confirm() -> rx.Component:
    """One dialog for the four actions: what it does in plain words, a note kept with the operator's name."""
    return note_dialog(
        EndpointsState.confirm_title, EndpointsState.confirm_text, open_=EndpointsState.confirm_action != "",
        on_submit=EndpointsState.confirm, on_keep=EndpointsState.keep, keep="Keep it as it is",
        act=EndpointsState.confirm_label, error=EndpointsState.confirm_error, max_width="520px",
        act_colour=pick(EndpointsState.confirm_action == "enable", "green", "red"),
        ids={"summary": "endpoint-confirm-text", "note": "endpoint-confirm-note", "error": "endpoint-confirm-error",
             "keep": "endpoint-confirm-keep", "act": "confirm-endpoint-action", "dialog": "endpoint-confirm-dialog"})


def endpoints_page() -> rx.Component:
    return shell(
        "Webhook endpoints",
        secondary("Where this tenant's order events are signed and sent (",
                  rx.link("how to verify them, and the API", href=DOCS_LINK, is_external=True,
                          data_testid="endpoints-docs-link"),
                  "). Private, loopback and metadata addresses are refused.", margin_bottom="12px"),
        rx.cond(EndpointsState.oncall, card(action_form(rx.flex(
            rx.vstack(rx.text("URL", size="1"), rx.input(name="url", placeholder="https://hooks.example.com/outbox",
                                                         width="360px", data_testid="endpoint-url"), spacing="1"),
            rx.vstack(rx.text("Description", size="1"),
                      rx.input(name="description", data_testid="endpoint-description"), spacing="1"),
            rx.vstack(rx.text("Events (none ticked: every event)", size="1"),
                      rx.hstack(*[rx.checkbox(t, name=f"type:{t}", value=t, size="1",
                                              data_testid=f"endpoint-type-{t}") for t in EVENTS], spacing="3",
                                wrap="wrap"), spacing="1"),
            action_button("Add endpoint", type="submit", data_testid="add-endpoint"),
            gap="12px", align="end", wrap="wrap"), on_submit=EndpointsState.create, reset_on_submit=True),
            margin_bottom="12px")),
        rx.cond(EndpointsState.notice != "", rx.callout(
            rx.vstack(rx.text(EndpointsState.notice, data_testid="endpoints-notice"),
                      rx.cond(EndpointsState.secret != "", rx.hstack(
                          rx.code(EndpointsState.secret, data_testid="endpoint-secret"),
                          rx.button("Copy", size="1", variant="soft", type="button",
                                    on_click=rx.set_clipboard(EndpointsState.secret),
                                    data_testid="copy-endpoint-secret"), align="center", spacing="2")),
                      spacing="2"), icon="key_round", width="100%", margin_bottom="12px")),
        error_callout(EndpointsState.error),
        _confirm(),
        data_table(["Endpoint", "Events", "State", "Health", ""], EndpointsState.endpoints, _endpoint_row,
                   "No webhook endpoints yet.", "endpoints-table"),
        paging.pager(EndpointsState.older, EndpointsState.newer, EndpointsState.has_older, EndpointsState.has_newer,
                     "endpoints-pager"),
    )


PAGE = Page(routes.ENDPOINTS, endpoints_page, "Webhook endpoints · Outbox",
            [AuthState.require_login, EndpointsState.load], ("Endpoints", "webhook"))

"""Disconnected means read-only (pure: the pages' component trees, no browser, no server).

Invariants: every event a page fires from a button, a form or a switch is an action made through
`dashboard.link` — dropped by the browser while the socket is down, never queued for the reconnect — unless it is
a read named below (it changes nothing in the database); every control that fires an action is disabled while the
link is down; the order page's missed-refresh note speaks for one missed change as for many.
(The browser side of both is e2e/test_offline.py.)
"""

from __future__ import annotations

from collections.abc import Iterator

import reflex as rx
from reflex.event import EventChain, EventSpec

from dashboard.pages import all_pages
from dashboard.pages.order_detail_data import missed_text

# Handlers that only read, open or close something on the page, or move the browser: a click of one made offline and
# sent on reconnect changes nothing anyone else sees. Anything else a page fires must be an action.
READS = {
    "SearchState.search", "LedgerState.set_filter", "LedgerState.search_recipient", "LedgerState.export",
    "RecipientsState.search", "AuditState.search", "JourneysState.search", "JourneysState.set_step",
    "JourneysState.select", "JourneysState.set_event", "CampaignsState.close_confirm", "CampaignsState.close_cancel",
    "CampaignsState.set_channel", "ApiKeysState.cancel_revoke", "EndpointsState.keep",
    "OpsState.load", "OpsState.close_confirm", "OpsState.set_window", "OpsState.tick_all", "OpsState.set_bulk",
    "OpsState.tick", "OrderState.dismiss_missed", "AuthState.login", "AuthState.go_home", "AuthState.to_login",
    "OrdersState.set_status_filter", "BalanceState.close_top_up", "OrderState.close_cancel",
    "OrderState.history_older", "OrderState.history_newer", "BalanceState.show_hour", "BalanceState.show_hours",
    # Reflex's browser-side call (rx.set_clipboard: the endpoint page's "Copy" of a secret): it runs in the browser
    # and never reaches the server.
    "_call_function",
}
PAGING = {"newer", "older"}  # every list's pager (dashboard/paging.py): a read


def _read(spec: EventSpec) -> bool:
    name = spec.handler.fn.__qualname__
    return name in READS or name.rsplit(".", 1)[-1] in PAGING


def _moves_the_browser_on_mount(trigger: str, spec: EventSpec) -> bool:
    """The shell's "session ended" notice sends the tab to /login when it mounts (dashboard/components.py): a
    script in the browser, fired by a delta the server just sent (the socket is up), never by a click."""
    return trigger == "on_mount" and spec.handler.fn.__qualname__ == "_call_script"


def _tree(c: rx.Component) -> Iterator[rx.Component]:
    yield c
    for child in getattr(c, "children", None) or []:
        if isinstance(child, rx.Component):
            yield from _tree(child)
    for name in ("comp", "true_value", "false_value", "render_fn", "match_cases", "default"):
        value = getattr(c, name, None)
        for v in value if isinstance(value, list | tuple) else [value]:
            for x in v if isinstance(v, list | tuple) else [v]:
                if isinstance(x, rx.Component):
                    yield from _tree(x)


def _events(c: rx.Component) -> Iterator[tuple[str, EventSpec]]:
    for trigger, chain in c.event_triggers.items():
        if isinstance(chain, EventChain):
            for spec in chain.events:
                if isinstance(spec, EventSpec):
                    yield trigger, spec


def _fired() -> Iterator[tuple[str, rx.Component, str, EventSpec]]:
    for page in all_pages():
        for c in _tree(page.component()):
            for trigger, spec in _events(c):
                yield page.route, c, trigger, spec


def test_every_event_a_page_fires_is_a_read_or_an_action_dropped_while_offline():
    queued = sorted({f"{route}: {spec.handler.fn.__qualname__} ({trigger})"
                     for route, _, trigger, spec in _fired()
                     if not spec.event_actions.get("temporal") and not _read(spec)
                     and not _moves_the_browser_on_mount(trigger, spec)})
    assert queued == [], ("events Reflex's client would queue while offline and fire on reconnect: make them with "
                          f"dashboard.link.action_button / action_form / when_online, or name them in READS: {queued}")


def test_every_control_that_fires_an_action_is_disabled_while_the_link_is_down():
    seen = 0
    for route, c, trigger, spec in _fired():
        if not spec.event_actions.get("temporal") or type(c).__name__ == "Form":
            continue  # a form's submit button is the control (below); the form itself drops the submit
        seen += 1
        assert "outboxLink" in str(getattr(c, "disabled", "")), \
            f"{route}: {spec.handler.fn.__qualname__} ({trigger}) stays enabled while offline"
    assert seen >= 15, "the pages' actions were found"
    submits = [(route, c) for page in all_pages() for c in _tree(page.component())
               if type(c).__name__ == "Form" for route in [page.route]]
    for route, form in submits:
        actions = [s for _, s in _events(form) if s.event_actions.get("temporal")]
        if not actions:
            continue
        buttons = [b for b in _tree(form)
                   if type(b).__name__ == "Button" and str(getattr(b, "type", "")).strip('"') == "submit"]
        assert buttons, f"{route}: a form of {actions[0].handler.fn.__qualname__} with no submit button"
        assert all("outboxLink" in str(getattr(b, "disabled", "")) for b in buttons), \
            f"{route}: the submit button of {actions[0].handler.fn.__qualname__} stays enabled while offline"


def test_the_missed_note_speaks_for_exactly_one_missed_change():
    one = missed_text(1, 2, "approved by alice at 07:46:29")
    assert one == ("refresh missed — reloaded at revision 2: 1 change since this page showed revision 1 "
                   "(approved by alice at 07:46:29)")
    many = missed_text(1, 3, "fulfilled by bob at 07:47:00")
    assert many == ("refresh missed — reloaded at revision 3: 2 changes since this page showed revision 1 "
                    "(the last: fulfilled by bob at 07:47:00)")
    assert missed_text(2, 2, "x") == "" and missed_text(3, 2, "x") == "", "nothing missed, nothing said"
    assert missed_text(1, 2, "") == ("refresh missed — reloaded at revision 2: 1 change since this page showed "
                                     "revision 1")

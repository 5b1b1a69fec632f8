"""Disconnected means read-only: the link to the backend as every page shows it, and the one way to make an action.

While the websocket is down (or the browser knows it is offline) every page says so in words, every action made
with `action_button` / `action_form` is disabled, and an action that still gets clicked is DROPPED, never queued:
Reflex's client would otherwise keep the click and send it when the socket comes back, minutes later, on a page the
operator has stopped looking at. After a reconnect Reflex re-runs the page's on_load (a reload from PostgreSQL), and
the banner says so for a few seconds; a page that can tell what changed meanwhile says that too (the order page).

The state lives in the browser (`link.js`): Reflex's client reports each connect and drop through its
`window.__reflex_otel` hooks, and the browser its own online/offline events. `<html data-outbox-link>` carries
it too ("up", "down", "back"), and `data-outbox-socket` the websocket alone ("up", "down"): tests wait on them.
"""

from __future__ import annotations

from typing import Any

import reflex as rx
from reflex.vars import VarData
from reflex_base.utils.imports import ImportVar
from reflex_components_core.core.banner import has_connection_errors

OFFLINE_TEXT = "Offline — reconnecting; your actions are paused."
OFFLINE_DETAIL = "Buttons come back with the connection. Nothing clicked while offline is sent, now or later."
BACK_TEXT = "Back online — this page was reloaded from the database."

_MODULE = rx.asset("link.js", shared=True).importable_path

# "up" | "down" | "back", re-rendered when it changes (a hook per component that reads it).
LINK_STATE: rx.Var[str] = rx.Var(
    "outboxLink",
    _var_type=str,
    _var_data=VarData(imports={_MODULE: [ImportVar(tag="useLinkState")]},
                      hooks={"const outboxLink = useLinkState();": None}),
)

# Down: the socket dropped, the browser is offline, or Reflex's client failed to (re)connect.
LINK_DOWN: rx.Var[bool] = (LINK_STATE == "down") | has_connection_errors


def when_online(trigger: Any) -> Any:
    """The event(s) of an action, dropped by Reflex's client when the socket is down instead of queued for later
    (`temporal`). Events the server sends back (a handler's follow-ups) are not affected."""
    if isinstance(trigger, list | tuple):
        return [when_online(t) for t in trigger]
    return trigger.temporal


def action_button(*children: Any, on_click: Any = None, disabled: Any = None, **props: Any) -> rx.Component:
    """A button that changes something: disabled while the link is down, its click dropped if one gets through.
    A submit button of an `action_form` takes no `on_click` (the form's submit is the action)."""
    off: Any = LINK_DOWN if disabled is None else LINK_DOWN | disabled
    if on_click is not None:
        props["on_click"] = when_online(on_click)
    return rx.button(*children, disabled=off, **props)


def action_form(*children: Any, on_submit: Any, **props: Any) -> rx.Component:
    """A form whose submit changes something: the submit is dropped while the link is down (Enter in a field
    submits it even when its button is disabled)."""
    return rx.form(*children, on_submit=when_online(on_submit), **props)


def link_banner() -> rx.Component:
    """On every page (the app's overlay, in place of Reflex's technical connection toast): the link in words."""
    return rx.fragment(
        rx.cond(
            LINK_DOWN,
            rx.el.div(
                rx.el.strong(OFFLINE_TEXT), " ", rx.el.span(OFFLINE_DETAIL),
                role="status", aria_live="polite", data_testid="link-banner", data_link="down",
                style=_BANNER | {"background": "#fff4d5", "color": "#4f3422", "border_bottom": "1px solid #ffc53d"},
            ),
            rx.cond(
                LINK_STATE == "back",
                rx.el.div(
                    rx.el.strong(BACK_TEXT),
                    role="status", aria_live="polite", data_testid="link-banner", data_link="back",
                    style=_BANNER | {"background": "#e6f6eb", "color": "#193b2d",
                                     "border_bottom": "1px solid #8eceaa"},
                ),
            ),
        ),
    )


_BANNER = {"position": "fixed", "bottom": "0", "left": "0", "right": "0", "z_index": "1000", "padding": "10px 16px",
           "font_size": "15px", "text_align": "center", "font_family": "system-ui, sans-serif",
           "box_shadow": "0 -2px 8px rgba(0,0,0,0.12)"}


def overlay(stateful: bool) -> rx.Component | None:
    """The app wrap that replaces Reflex's default overlay (its connection pulser and toast)."""
    from reflex_base.components.memo import memo

    if not stateful:
        return None

    def outbox_link_overlay() -> rx.Component:
        return link_banner()

    return rx.fragment(memo(outbox_link_overlay)())

"""Plain component functions shared by the pages: the shell, badges, tables, empty and loading states."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar

import reflex as rx
from reflex.vars import ArrayVar, ObjectVar
from reflex_base.constants.colors import ColorType
from reflex_components_lucide.icon import Icon
from reflex_components_radix.themes.base import LiteralAccentColor

from dashboard.link import action_button, action_form
from dashboard.search_state import search_box
from dashboard.state import AuthState

# One row of a table as the browser holds it: every page formats its values to strings on the server.
Row: TypeAlias = ObjectVar[dict[str, str]]

# `rx.icon` is a function that shares its name with its own submodule (`reflex_components_lucide.icon`), and mypy
# resolves the name to the module ("Module not callable"). `Icon.create` is that same function under a name it follows.
icon = Icon.create

T = TypeVar("T")

STATUS_COLOURS: dict[str, LiteralAccentColor] = {
    "QUEUED": "amber", "SENT": "blue", "DELIVERED": "green", "FAILED": "red", "SUPPRESSED": "gray",
    "authorized": "amber", "approved": "green", "cancelled": "gray", "fulfilled": "blue",
}


def status_badge(status: rx.Var[str] | str, **props: Any) -> rx.Component:
    badge = rx.match(
        status,
        *[(k, rx.badge(k, color_scheme=v, variant="soft", **props)) for k, v in STATUS_COLOURS.items()],
        rx.badge(status, variant="soft", **props),
    )
    assert isinstance(badge, rx.Component)  # branches that are components make a Match component, never a Var
    return badge


NAV: list[tuple[str, str, str]] = []  # (label, route, icon) filled by the page registry


def nav_active(route: str) -> rx.Var[bool]:
    """Is this page, or one of its own pages (/orders/913 under /orders), the one showing? From the router's path
    (a full load of a static export arrives as /ledger/)."""
    path = AuthState.router.page.path
    active = (path == route) | path.startswith(route + "/")
    assert isinstance(active, rx.Var)  # a comparison of Vars is a Var
    return active


def nav_link(label: str, route: str, icon_name: str) -> rx.Component:
    active = nav_active(route)
    link = rx.link(
        rx.hstack(icon(icon_name, size=16), rx.text(label, size="2", weight=pick(active, "bold", "medium")),
                  spacing="2", align="center"),
        href=route, underline="none", color_scheme=pick(active, "indigo", "gray"), high_contrast=True,
        white_space="nowrap", flex_shrink="0", padding_x="10px", padding_y="6px", border_radius="6px",
        # The current page's link is marked for the eye (a tinted pill, an underline bar) and for a screen reader.
        background=pick(active, rx.color("indigo", 4), "transparent"),
        box_shadow=pick(active, f"inset 0 -2px 0 {rx.color('indigo', 9)}", "none"),
        aria_current=pick(active, "page", "false"), data_active=pick(active, "true", "false"),
        _hover={"background": rx.color("gray", 3)},
    )
    # Platform on-call belongs to no tenant: only the Ops page (the server redirects the others anyway).
    return link if route == "/ops" else rx.cond(AuthState.platform, rx.fragment(), link)


# Where the navigation goes, by Radix breakpoint (initial, xs 520, sm 768, md 1024, lg 1280, xl 1640): in the top bar
# only from 1640 px, where every link fits beside the operator's badges; below that, a row of its own that never
# wraps and scrolls sideways inside itself if it must (a wrapped top bar hid "Log out" at 960 px).
NAV_IN_BAR = ["none", "none", "none", "none", "none", "flex"]
NAV_BELOW = ["flex", "flex", "flex", "flex", "flex", "none"]


def _session_gone() -> rx.Component:
    """This tab's session ended elsewhere (a logout in another tab, an expiry, the operator removed) and a handler
    found it: say so and go to the login page, which comes back here after login (AuthState._become)."""
    return rx.cond(AuthState.session_gone, rx.el.div(
        rx.callout("Your session has ended — taking you to the login page.", icon="log_out", color_scheme="amber",
                   size="1"),
        on_mount=AuthState.to_login,
        data_testid="session-gone", role="status"))


def shell(title: str | rx.Var[str], *children: rx.Component, actions: rx.Component | None = None) -> rx.Component:
    return rx.box(
        rx.hstack(
            rx.hstack(
                icon("send", size=20, color=rx.color("indigo", 9)),
                rx.heading("Outbox", size="4", weight="bold"),
                spacing="2", align="center",
            ),
            # A plain element carries the responsive display: on a Radix Flex the same rule lost to `.rt-Flex
            # {display: flex}` on some pages (/ops loads more CSS after it), and the hidden bar widened the page.
            rx.el.div(rx.hstack(*[nav_link(*n) for n in NAV], spacing="1"), display=NAV_IN_BAR, data_testid="nav-bar"),
            rx.spacer(),
            # On a phone (below 768 px) the search takes a row of its own under the bar (order 3, full width), and
            # the operator's name stays beside Log out: both reachable, nothing clipped, nothing sideways.
            rx.cond(AuthState.logged_in & ~AuthState.platform,
                    rx.el.div(search_box(testid="nav-search"), width=["100%", "100%", "260px"],
                              order=["3", "3", "0"], data_testid="nav-search-box")),
            rx.cond(
                AuthState.logged_in,
                rx.hstack(
                    rx.badge(AuthState.tenant_label, variant="outline", data_testid="tenant-label",
                             max_width=["110px", "200px", "none"], overflow="hidden", text_overflow="ellipsis"),
                    rx.el.span(rx.badge(AuthState.role, variant="soft", color_scheme="gray",
                                        data_testid="operator-role"), display=["none", "inline"]),
                    rx.text(AuthState.display_name, size="2", data_testid="operator-name", white_space="nowrap",
                            max_width=["110px", "none"], overflow="hidden", text_overflow="ellipsis"),
                    action_button("Log out", on_click=AuthState.logout, variant="ghost", size="1",
                              data_testid="logout"),
                    spacing="3", align="center", flex_shrink="0",
                ),
            ),
            _session_gone(),
            padding_x=["12px", "20px"], padding_y="10px", align="center", spacing=rx.breakpoints(initial="3", sm="5"),
            flex_wrap=["wrap", "wrap", "nowrap"], row_gap="8px",
            border_bottom=f"1px solid {rx.color('gray', 5)}", background=rx.color("gray", 1),
            position="sticky", top="0", z_index="10",
        ),
        rx.hstack(*[nav_link(*n) for n in NAV], spacing="1", padding_x="12px", padding_y="6px", overflow_x="auto",
                  display=NAV_BELOW, border_bottom=f"1px solid {rx.color('gray', 4)}", data_testid="nav-row"),
        rx.box(
            rx.hstack(rx.heading(title, size="6"), rx.spacer(), actions or rx.fragment(), align="center",
                      margin_bottom="16px", wrap="wrap", spacing="3"),
            *children,
            # min_width 0: a wide table scrolls inside its own box instead of widening the page.
            padding=["12px", "20px", "24px"], max_width="1280px", margin_x="auto", min_width="0",
        ),
        min_height="100vh", background=rx.color("gray", 2),
    )


def pick(condition: rx.Var[bool], when_true: T, when_false: T) -> rx.Var[T]:
    """`rx.cond` between two plain values (a label, a colour): a conditional Var."""
    # Reflex declares cond's value overloads after a TypeVar statement that ends the overload group, so mypy sees only
    # the component ones; the call is the documented one.
    chosen = rx.cond(condition, when_true, when_false)  # type: ignore[call-overload]  # see the comment above
    assert isinstance(chosen, rx.Var)  # two plain values make a conditional Var, never a component
    return chosen


def lookup(value: rx.Var[str], table: Mapping[str, T], default: T) -> rx.Var[T]:
    """`rx.match` from a value to plain values (a status to its colour): a Var."""
    chosen = rx.match(value, *table.items(), default)
    assert isinstance(chosen, rx.Var)  # plain values make a Var, never a component
    return chosen


def card(*children: rx.Component, **props: Any) -> rx.Component:
    return rx.card(*children, width="100%", **props)


# Secondary words, in the grey Radix keeps for low-contrast text (step 11), at two sizes.
def caption(*children: Any, **props: Any) -> rx.Component:
    """Small secondary text: a label above a value, a timestamp, a reason under a status (size 1)."""
    return rx.text(*children, size="1", color=rx.color("gray", 11), **props)


def secondary(*children: Any, **props: Any) -> rx.Component:
    """Secondary text at reading size: what a page or a section is for, under its heading; a subtitle (size 2)."""
    return rx.text(*children, size="2", color=rx.color("gray", 11), **props)


def labelled(label: str, *value: rx.Component, **props: Any) -> rx.Component:
    """A value under its caption: one fact of a card (Status, Revision, Customer, …)."""
    return rx.vstack(caption(label), *value, spacing="1", **props)


def stat(label: str, value: rx.Var[str] | str, testid: str = "", colour: ColorType = "gray") -> rx.Component:
    return card(
        caption(label, weight="medium"),
        rx.text(value, size="6", weight="bold", color=rx.color(colour, 12), data_testid=testid or None),
        min_width="140px", flex="1",
    )


def data_table(headers: Sequence[str], rows: ArrayVar[Any], render_row: Callable[[Row], rx.Component], empty: str,
               testid: str = "") -> rx.Component:
    return rx.cond(
        rows.length() > 0,
        rx.box(
            rx.table.root(
                rx.table.header(rx.table.row(*[rx.table.column_header_cell(h) for h in headers])),
                rx.table.body(rx.foreach(rows, render_row)),
                variant="surface", size="1", width="100%", data_testid=testid or None,
            ),
            overflow_x="auto", width="100%",
        ),
        empty_state(empty),
    )


def action_row(a: dict[str, object]) -> dict[str, str]:
    """A privileged action (domain/access/actions.py) as a table row."""
    at = a.get("at")
    return {"at": at.strftime("%Y-%m-%d %H:%M:%S") if hasattr(at, "strftime") else "", "who": str(a["actor_ref"]),
            "what": str(a["action"]), "target": str(a["target"]), "note": str(a.get("note") or ""),
            # Lane controls act on every tenant: they belong to none.
            "tenant": str(a["tenant_id"]) if a.get("tenant_id") else "all"}


ACTION_HEADERS = ("When (UTC)", "Tenant", "Who", "What", "On", "Note")


def action_table_row(a: Row) -> rx.Component:
    return rx.table.row(rx.table.cell(rx.text(a["at"], size="1")), rx.table.cell(rx.text(a["tenant"], size="1")),
                        rx.table.cell(a["who"]), rx.table.cell(rx.badge(a["what"], variant="soft")),
                        rx.table.cell(a["target"]), rx.table.cell(rx.text(a["note"], size="1")),
                        data_testid="action-row")


def empty_state(text: str) -> rx.Component:
    return rx.center(
        rx.vstack(icon("inbox", size=28, color=rx.color("gray", 9)), rx.text(text, color=rx.color("gray", 11)),
                  align="center", spacing="2"),
        padding="32px", width="100%", border=f"1px dashed {rx.color('gray', 6)}", border_radius="8px",
        data_testid="empty-state",
    )


def loading(flag: rx.Var[bool], *children: rx.Component) -> rx.Component:
    return rx.cond(flag, rx.center(rx.spinner(size="3"), padding="32px", data_testid="loading"),
                   rx.fragment(*children))


def error_callout(message: rx.Var[str], testid: str = "error") -> rx.Component:
    return rx.cond(message != "", rx.callout(message, icon="triangle_alert", color_scheme="red", role="alert",
                                             data_testid=testid, width="100%"))


NOTE_MAX = 500  # characters of an operator's note (the API's `fields.NOTE_MAX` says the same)


def note_dialog(title: Any, summary: Any, *, open_: rx.Var[bool], on_submit: Any, on_keep: Any, keep: str,
                act: Any, ids: Mapping[str, str], error: rx.Var[str] | None = None,
                placeholder: str = "Why, for whoever looks later", act_colour: Any = None,
                max_width: str = "480px", focus_note: bool = False) -> rx.Component:
    """An action asked before it happens: what it does (`summary`), a note kept with the operator's name, and two
    buttons — `keep` backs out, `act` submits (an action form: dropped while offline). `error` (the handler's answer
    to a missing note) shows under the note. `ids`: the test ids of `summary`, `note`, `error`, `keep`, `act` and
    `dialog` (each optional: the pages' tests read them)."""
    def tid(part: str) -> dict[str, Any]:
        return {"data_testid": ids[part]} if part in ids else {}

    return rx.alert_dialog.root(
        rx.alert_dialog.content(
            rx.alert_dialog.title(title),
            rx.alert_dialog.description(summary, size="2", **tid("summary")),
            action_form(rx.vstack(
                rx.text_area(name="note", placeholder=placeholder, max_length=NOTE_MAX, width="100%",
                             auto_focus=focus_note, **tid("note")),
                *([rx.cond(error != "", rx.text(error, size="1", color=rx.color("red", 11), **tid("error")))]
                  if error is not None else []),
                rx.hstack(rx.spacer(),
                          rx.button(keep, type="button", variant="soft", color_scheme="gray", on_click=on_keep,
                                    **tid("keep")),
                          action_button(act, type="submit", color_scheme=act_colour, **tid("act")), width="100%"),
                spacing="3", width="100%"), on_submit=on_submit, reset_on_submit=True),
            max_width=max_width, **tid("dialog")),
        open=open_,
    )

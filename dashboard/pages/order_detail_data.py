"""What the order page reads and how it words it, pure but for the one read: an order's page at one version
(`load_order`: the version first, then the order, its newest history, who cancelled it, its notifications), a change
of its history as a row, the missed-refresh note, the revision and status an order's own hint announces, and the
words of a refused command.
"""

from __future__ import annotations

from typing import Any

from dashboard.format import MAX_ID, change_line, done_line, notification, when
from domain.access import actions as operator_actions
from domain.orders import views as order_views
from domain.orders.policy import Reject
from domain.orders.views import ORDER_CANCEL, order_target
from domain.support import pages
from domain.support.pages import keyset
from domain.vocabulary import ORDER_STATUSES

PAST = {"approve": "approved", "cancel": "cancelled", "fulfill": "fulfilled"}

ERROR_TEXT = {
    "optimistic_conflict": "Someone changed this order first{change}: it is now at revision {rev}. "
                           "The page shows the latest state; check it and try again.",
    "policy_denied": "Not allowed: an order that is {status} cannot be {requested}. Nothing was changed.",
    "unknown_command": "Unknown action.",
}


def load_order(tenant: int, order_id: int) -> tuple[dict[str, Any] | None, list[dict[str, str]], str | None]:
    """The version first, then the data: what is shown is at least as new as the version kept with it."""
    version, order, change, notes = order_views.order_page(tenant, order_id)
    if order is None:
        return None, [], version
    order["last_change"] = change_line(change)
    first = keyset(order.pop("history"), HISTORY_PAGE, None, None)
    order["history"] = ([history_row(h) for h in first.rows], first.has_older)
    # Who cancelled it, when and why, from the audit log: read only for a cancelled order (a push reloads this).
    order["cancelled_by"] = ""
    if order["status"] == "cancelled":
        done = [a for a in operator_actions.on_target(tenant, order_target(order_id)) if a["action"] == ORDER_CANCEL]
        order["cancelled_by"] = done_line("Cancelled", done[-1] if done else None)
    return order, [notification(n) for n in notes], version


HISTORY_PAGE = 20  # changes per page of the order's history (order_views.order_page reads one more)


def history_row(h: dict[str, Any]) -> dict[str, str]:
    """One change of the order, for its history table: revision, what, who, when (UTC), the note. Pure."""
    who = str(h["actor_ref"] or "")
    return {"id": str(h["id"]), "what": str(h["event_type"]).removeprefix("order."),
            "who": who.removeprefix("operator:") or "—", "at": when(h["occurred_at"]), "note": h.get("note") or ""}


def missed_text(shown: int, now: int, last_change: str) -> str:
    """What changed while the page could not show it: the order went from revision `shown` (what this tab last showed)
    to `now` — one change or many — or nothing to say ("")."""
    if now <= shown:
        return ""
    changes = "1 change" if now - shown == 1 else f"{now - shown} changes"
    last = f" ({last_change})" if now - shown == 1 else f" (the last: {last_change})"
    return (f"refresh missed — reloaded at revision {now}: {changes} since this page showed revision {shown}"
            f"{last if last_change else ''}")


def pushed_head(msg: dict[str, Any]) -> tuple[int, str] | None:
    """The revision and status an order's own hint says it committed (`wakeups.refresh_message`), or None: a hint
    of another kind, or one whose values are not a plain revision and a known status, shows nothing before the
    reload. Pure."""
    rev, status = msg.get("revision"), msg.get("status")
    if msg.get("kind") != "order" or isinstance(rev, bool) or not isinstance(rev, int) or not 1 <= rev <= MAX_ID:
        return None
    return (rev, status) if isinstance(status, str) and status in ORDER_STATUSES else None


def history_page(tenant: int, order_id: int, before: int, after: int) -> tuple[list[dict[str, str]], bool, bool]:
    """A page of the order's history as rows (keyset on the revision: older than `before`, or newer than `after`; 0
    for neither) and whether there are older and newer pages. Blocking: run it on a thread."""
    page = pages.order_history(tenant, order_id, HISTORY_PAGE, before or None, after or None)
    return [history_row(h) for h in page.rows], page.has_older, page.has_newer


def refused_text(result: Reject, command: str, change: str) -> str:
    """What a refused command says: the order moved first (`change`: who moved it, e.g. "approved by alice at …") or
    the policy does not allow it from where it stands. Pure."""
    return ERROR_TEXT[result.error].format(rev=result.current_revision, status=result.current_status,
                                           requested=PAST[command], change=f" ({change})" if change else "")

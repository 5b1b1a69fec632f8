"""The live pages' one task helper (dashboard/live_task.py), on the pages' real state classes (no server, no browser;
no database: a tab without a session hash is ended without a lookup).

Invariants: a tab has one live task — a newer page load or reconnect supersedes the older one and a logout ends it;
a task assigns nothing once the tab is logged in as someone else, or logged out, than when it started; a task whose
read found the session ended assigns nothing more and the tab forgets its operator (its shell goes to /login),
unless the tab has logged in as someone else meanwhile, whose session is kept. (The browser side:
e2e/test_sessions.py.)
"""

from __future__ import annotations

import asyncio

from dashboard import live
from dashboard.live_task import LiveTask
from dashboard.pages.orders import OrdersState


def _tab(tenant: int = 42, operator: int = 7) -> OrdersState:
    state = OrdersState(_reflex_internal_init=True)  # how Reflex builds a state outside an app
    state._tenant_id, state._operator_id, state.display_name = tenant, operator, "alice"
    return state


async def _noop() -> str:
    return "rows"


def test_a_newer_task_of_the_same_tab_supersedes_the_older_and_a_logout_ends_it() -> None:
    tab = _tab()
    older = asyncio.run(LiveTask.start(tab))
    newer = asyncio.run(LiveTask.start(tab))
    assert not older.still_wanted() and newer.still_wanted(), "a reload of the tab leaves one live task"
    assert asyncio.run(older.wait(0)) is False, "a superseded task does not wait for another round"
    live.end_watch(tab.router.session.client_token)
    assert not newer.still_wanted(), "a logout stops the tab's task before it pushes again"


def test_a_task_assigns_nothing_once_the_tab_is_someone_else_or_logged_out() -> None:
    tab = _tab()
    tab._version = "v1"
    task, seen = asyncio.run(LiveTask.start_reading(tab, lambda: tab._version))
    assert task.still_mine() and (task.tenant, task.operator, seen) == (42, 7, "v1")
    tab._operator_id = 8  # another login in this tab
    assert not task.still_mine()
    assert tab._session() == (42, 8) and not tab.session_gone, "the new login is left alone"
    tab._tenant_id, tab._operator_id = 0, 0  # logged out
    assert not task.still_mine()


def test_a_read_that_finds_the_session_ended_forgets_the_operator_and_assigns_nothing() -> None:
    tab = _tab()  # no session hash: ended, without a lookup
    task = asyncio.run(LiveTask.start(tab))
    assert asyncio.run(task.read(_noop())) == "rows", "the read itself still returns what it read"
    assert not task.still_mine(), "nothing read under an ended session is assigned"
    assert tab._session() == (0, 0) and tab.session_gone, "the tab forgets its operator and goes to /login"
    assert not task.still_mine(), "and stays over"


def test_an_ended_session_does_not_log_out_a_newer_login_in_the_same_tab() -> None:
    tab = _tab()
    task = asyncio.run(LiveTask.start(tab))
    asyncio.run(task.read(_noop()))  # alice's session ended elsewhere
    tab._operator_id, tab.display_name = 9, "bob"  # meanwhile bob logged in in this tab
    assert not task.still_mine()
    assert tab._session() == (42, 9) and not tab.session_gone, "bob's session is kept"

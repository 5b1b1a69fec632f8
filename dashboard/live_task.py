"""One tab's live task, written once for every live page (the orders list, an order, campaigns, /ops).

A live page's `load` starts a Reflex background event that reloads what the page shows: on each hint of the
process's hub (`dashboard/live.py`), or every few seconds. Its rules, held here:

- One task per tab: a newer page load or reconnect of the same tab takes over (`live.take_over_watch`) and a logout
  ends it (`live.end_watch`); a superseded task stops before it assigns anything more.
- Bound to who the tab was logged in as when the task started (`AuthState._session`): after a logout or another
  login in the tab, it assigns nothing more.
- Each reload reads outside the state lock (never I/O under it), together with the session's check in the
  database: a session that ended elsewhere (a logout in another tab, an expiry, an operator removed) is pushed
  nothing more, and the tab forgets its operator as any handler's `_fresh` would (`session_gone` takes it to the
  login page), unless it has logged in as someone else meanwhile.

The shape of a task (`still_mine` under the lock before reading what to reload and again before assigning):

    task = await LiveTask.start(self)  # or `task, seen = await LiveTask.start_reading(self, lambda: ...)`
    if not task.tenant:
        return
    while await task.wait(SECONDS):  # or: `async for _ in hints` of `task.view(channel, probe, seen).hints()`
        async with self:
            if not task.still_mine():
                return
            where = ...
        data = await task.read(asyncio.to_thread(fetch, task.tenant, where))
        async with self:
            if not task.still_mine():
                return
            if where == ...:  # else: the operator moved meanwhile
                ...assign data...
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dashboard import live
from dashboard.state import AuthState

T = TypeVar("T")


class LiveTask:
    """A tab's live task: whether it is still wanted, and who it reads for (the session it started under)."""

    def __init__(self, state: AuthState, still_wanted: Callable[[], bool], session: tuple[int, int],
                 hashed: str) -> None:
        self.state, self.still_wanted, self.session, self._hashed = state, still_wanted, session, hashed
        self.ended = False  # a read found the tab's session ended in the database: this task is over

    @classmethod
    async def start(cls, state: AuthState) -> LiveTask:
        """Take over the tab's live task, then note (under the state lock) who the tab is logged in as."""
        return (await cls.start_reading(state, lambda: None))[0]

    @classmethod
    async def start_reading(cls, state: AuthState, read: Callable[[], T]) -> tuple[LiveTask, T]:
        """`start`, and in the same hold of the state lock what else the task starts from (the version shown, the
        scope): read with the session, so both are of the same login."""
        still_wanted = live.take_over_watch(state.router.session.client_token)
        async with state:
            return cls(state, still_wanted, state._session(), state._session_hash), read()

    @property
    def tenant(self) -> int:
        """The tenant the task reads for (0: none — a platform operator, or nobody logged in)."""
        return self.session[0]

    @property
    def operator(self) -> int:
        return self.session[1]

    def view(self, channel: str, probe: live.Probe, seen: object) -> live.View:
        """This task's registration on a hub channel (`live.view`): its hints end when the task is superseded."""
        return live.view(channel, self.still_wanted, probe, seen)

    async def wait(self, seconds: float) -> bool:
        """The period of a page that refreshes on a clock: False once the task is superseded (before or after)."""
        if not self.still_wanted():
            return False
        await asyncio.sleep(seconds)  # the page's refresh period, not a wait for a condition
        return self.still_wanted()

    async def read(self, load: Awaitable[T]) -> T:
        """A reload (started outside the state lock), and the session's check in the database beside it."""
        return (await asyncio.gather(self.session_ended(), load))[1]

    async def session_ended(self) -> bool:
        """The session's check in the database alone (the order page starts it beside its reload and awaits it
        first, to show a hint's revision before the reload answers); an ended session ends the task."""
        ended = await self.state._session_ended(self._hashed)
        self.ended = self.ended or ended
        return ended

    def still_mine(self) -> bool:
        """Under the state lock, before the task reads what to reload or assigns what it read: the tab is still
        logged in as the task's operator, whose session has not ended. An ended one is forgotten here, unless the
        tab has logged in as someone else meanwhile (`AuthState._forget_if`)."""
        if self.ended:
            self.state._forget_if(self.session)
            return False
        return self.state._session() == self.session

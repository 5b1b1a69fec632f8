"""A batched lane's doorbell (jobs/wake.py `Doorbell`): one wake-up wakes one drain loop, never loses a ring.

Invariants protected: a ring wakes exactly one of the waiting loops (the others keep waiting: no herd of empty
claims for one row); a ring with no loop waiting stays rung for the next one to wait; a loop that gave up waiting
(its idle poll) takes no later ring with it; a ring that reached a loop just as it was cancelled is passed on;
`ring_all` (stopping) wakes every loop.
"""

from __future__ import annotations

import asyncio
import contextlib

from jobs.wake import Doorbell


async def _waiters(bell: Doorbell, n: int) -> tuple[list[asyncio.Task[None]], list[int]]:
    woke: list[int] = []

    async def wait(i: int) -> None:
        await bell.wait()
        woke.append(i)

    tasks = [asyncio.create_task(wait(i)) for i in range(n)]
    await _turns()  # every one of them waiting
    return tasks, woke


async def _turns(n: int = 5) -> None:
    """Let the event loop run every task that is ready, a few turns over: a resolved wait resumes within one turn,
    so what has not woken after these is not woken (counted in loop turns, not in time: no sleep to outwait)."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_one_ring_wakes_one_loop_and_a_second_ring_the_next() -> None:
    async def go() -> None:
        bell = Doorbell()
        tasks, woke = await _waiters(bell, 3)
        bell.set()
        await _turns()
        assert len(woke) == 1, woke
        bell.set()
        await _turns()
        assert len(woke) == 2 and not bell.is_set()
        bell.ring_all()
        await asyncio.wait_for(asyncio.gather(*tasks), 1)
        assert sorted(woke) == [0, 1, 2]

    asyncio.run(go())


def test_a_ring_with_nobody_waiting_is_kept_for_the_next_wait_and_clear_takes_it() -> None:
    async def go() -> None:
        bell = Doorbell()
        bell.set()
        assert bell.is_set()
        await asyncio.wait_for(bell.wait(), 1)  # returns at once, and takes the ring
        assert not bell.is_set()
        bell.set()
        bell.clear()  # a loop about to claim takes a pending ring
        waiting = asyncio.create_task(bell.wait())
        await _turns()
        assert not waiting.done(), "a cleared ring still woke a loop"
        waiting.cancel()

    asyncio.run(go())


def test_a_loop_that_gave_up_waiting_takes_no_later_ring() -> None:
    async def go() -> None:
        bell = Doorbell()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(bell.wait(), 0.01)  # the idle poll ran out
        tasks, woke = await _waiters(bell, 1)
        bell.set()
        await asyncio.wait_for(tasks[0], 1)
        assert woke == [0]

    asyncio.run(go())


def test_a_ring_that_reaches_a_loop_as_it_is_cancelled_is_passed_on() -> None:
    async def go() -> None:
        bell = Doorbell()
        tasks, woke = await _waiters(bell, 2)
        bell.set()  # resolves loop 0's wait ...
        tasks[0].cancel()  # ... which is cancelled before it runs again
        await _turns()
        assert woke == [1], woke
        assert tasks[0].cancelled()

    asyncio.run(go())

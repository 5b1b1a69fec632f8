"""A batched lane's doorbell (jobs/wake.py `Doorbell`): one wake-up wakes one drain loop, never loses a ring.

Invariants protected: a ring wakes exactly one of the waiting loops (the others keep waiting: no herd of empty
claims for one row); a ring with no loop waiting stays rung for the next one to wait; a loop that gave up waiting
(its idle poll) takes no later ring with it; a ring that reached a loop just as it was cancelled is passed on;
`ring_all` (stopping) wakes every loop. A late second ring (`ring_unless_claimed_since`) rings unless a claim
began after it arrived or every row it names was claimed already — a ring naming a row not claimed, or naming
none, with no claim since, still rings; the ids a wake-up names are read back exactly, and anything else in it
names nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from domain.delivery.wakeups import NAMED_ROWS_MAX, named_rows, wake_payload
from jobs.wake import CLAIMED_KEPT, Doorbell


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


def test_a_late_ring_is_dropped_only_when_a_claim_began_after_it_or_its_rows_were_claimed() -> None:
    async def go() -> None:
        bell = Doorbell()
        arrived = time.monotonic()
        bell.clear()  # a loop began a claim after the ring arrived: that claim saw the ring's commit
        assert bell.ring_unless_claimed_since(arrived) is False and not bell.is_set()
        later = time.monotonic() + 1.0  # no claim began after this one arrived
        assert bell.ring_unless_claimed_since(later) is True and bell.is_set()
        bell.clear()
        bell.note_claimed([7, 8])
        assert bell.ring_unless_claimed_since(later, frozenset({7, 8})) is False, "both rows claimed here"
        assert bell.ring_unless_claimed_since(later, frozenset({7, 9})) is True, "row 9 was never claimed"

    asyncio.run(go())


def test_a_doorbell_remembers_a_bounded_number_of_claimed_rows() -> None:
    bell = Doorbell()
    bell.note_claimed(range(CLAIMED_KEPT + 10))
    later = time.monotonic() + 1.0
    assert bell.ring_unless_claimed_since(later, frozenset({0})) is True, "the oldest ids are forgotten"
    bell.clear()
    assert bell.ring_unless_claimed_since(later, frozenset({CLAIMED_KEPT + 9})) is False


def test_a_wake_up_names_its_rows_exactly_or_none() -> None:
    assert named_rows(wake_payload([3, 41, 5])) == {3, 41, 5}
    assert named_rows(wake_payload([3, 41, 5]).encode()) == {3, 41, 5}
    assert wake_payload(list(range(NAMED_ROWS_MAX + 1))) == "" and wake_payload(None) == ""
    for junk in ("", b"", None, "lane:critical", "1,,2", "1;2"):
        assert named_rows(junk) == frozenset(), junk

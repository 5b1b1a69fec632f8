"""Calls started together on threads, for the races a second worker or a second request makes (`at_once`)."""

from __future__ import annotations

import threading
from typing import Any


def at_once(*calls: Any) -> list[Any]:
    """Each call on a thread of its own, all released together by a barrier; their answers in order (an exception
    raised is the answer, for the test to assert on)."""
    out: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:  # the answer, whatever it is
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out

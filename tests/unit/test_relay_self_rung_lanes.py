"""The relay leaves a NOTIFY of a lane to that lane's worker only when the worker hears it itself.

Invariant protected: a one-time code's commit is not scanned by the relay on its NOTIFY when the critical lane's drain
loops LISTEN for it themselves (jobs/wake.py LISTEN_LANES) — the scan's FOR UPDATE SKIP LOCKED on that very row made
the worker's claim skip it and sleep until the next ring (wake p99 29–33 ms, against 13 without it); and a lane whose
worker does not LISTEN (not batched: one arq job a row) is still woken by the relay on its NOTIFY.
"""

from __future__ import annotations

import pytest

from domain.settings import reload_settings
from jobs.relay import self_rung_lanes


@pytest.fixture
def lanes_batched(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def batched(value: str) -> None:
        monkeypatch.setenv("OUTBOX_BATCH_LANES", value)
        reload_settings()

    yield batched
    monkeypatch.delenv("OUTBOX_BATCH_LANES", raising=False)
    reload_settings()


def test_the_critical_lanes_notify_is_left_to_its_listening_worker(lanes_batched):  # type: ignore[no-untyped-def]
    lanes_batched("critical,high,normal,bulk")
    assert self_rung_lanes() == {"critical"}


def test_a_lane_whose_worker_does_not_listen_is_still_scanned_on_its_notify(lanes_batched):  # type: ignore[no-untyped-def]
    lanes_batched("high,normal")
    assert self_rung_lanes() == set()

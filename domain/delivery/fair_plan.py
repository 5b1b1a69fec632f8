"""Who goes next on the bulk lane: its pace shared between tenants, and within a tenant between its campaigns.

A *flow* is one tenant's one campaign (campaign 0: the tenant's bulk messages sent one by one through the API).
Two pure decisions, values in and values out (the relay and the wake-up enqueue apply them,
domain/delivery/fair_queue.py):

- `windows`: how many of each flow's oldest owed rows the relay keeps as wake-ups in Redis. The lane's window is
  split equally between tenants, a tenant's share equally between its flows; a tenant whose pace is capped gets no
  more than `horizon` seconds of its cap (more would only wait in Redis). What a flow cannot fill (it owes fewer)
  goes, in a second round, to the flows that filled theirs — the window is never left idle while rows are owed.
- `gap_ms`: how far one job of a flow advances that flow's virtual time. The enqueue scores each bulk job
  max(V, the flow's last score) + gap (start-time fair queueing; V: the queue's head), and arq starts the due jobs
  lowest score first — so flows interleave job by job: a tenant's campaigns share one tenant's turn (the gap grows
  with their number).
- `bulk_window`: how many of the lane's owed rows the relay keeps as wake-ups at all (a few scans' worth).
- `reserve_ahead`: how far ahead a capped tenant's job may reserve its moment (jobs/worker.py); a job that cannot
  ends without a claim and the relay's next scan wakes its row again, in fair order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

# Seconds of a capped tenant's pace that the relay keeps in Redis (more would only wait there).
CAP_HORIZON_S: Final[float] = 5.0
# The bulk window: this many scan intervals of the lane's pace, never fewer rows than the minimum.
BULK_WINDOW_SCANS: Final[float] = 2.0
MIN_BULK_WINDOW: Final[int] = 200
# A capped tenant's jobs waiting in worker slots for their moment, at most (the rest go back to PostgreSQL).
SLEEPERS_PER_TENANT: Final[int] = 8


@dataclass(frozen=True, order=True)
class Flow:
    tenant_id: int
    campaign_id: int  # 0: not a campaign

    @property
    def key(self) -> str:
        return f"{self.tenant_id}:{self.campaign_id}"


def tenant_rate(channel_rate: float, default_cap: float | None, override: float | None) -> float:
    """A tenant's bulk pace: its own setting, else the lane's default cap, never above the channel's rate."""
    cap = override if override is not None else default_cap
    return channel_rate if cap is None else min(cap, channel_rate)


def windows(flows: list[Flow], window: int, caps: dict[int, float] | None = None) -> dict[Flow, int]:
    """First-round share of `window` for each flow (at least 1 each). `caps`: the capped tenants' rates."""
    caps = caps or {}
    by_tenant: dict[int, list[Flow]] = {}
    for f in sorted(flows):
        by_tenant.setdefault(f.tenant_id, []).append(f)
    if not by_tenant:
        return {}
    out: dict[Flow, int] = {}
    per_tenant = window / len(by_tenant)
    for tenant, fs in by_tenant.items():
        share = per_tenant
        if tenant in caps:
            share = min(share, max(1.0, caps[tenant] * CAP_HORIZON_S))
        for f in fs:
            out[f] = max(1, math.floor(share / len(fs)))
    return out


def spare(shares: dict[Flow, int], taken: dict[Flow, int], window: int,
          caps: dict[int, float] | None = None) -> dict[Flow, int]:
    """Second round: the window's unused room, split equally among the uncapped flows that filled their share."""
    caps = caps or {}
    room = window - sum(taken.values())
    full = [f for f, n in shares.items() if taken.get(f, 0) >= n and f.tenant_id not in caps]
    if room <= 0 or not full:
        return {}
    return {f: room // len(full) for f in full if room // len(full) > 0}


def bulk_window(relay_window: int, rate: float, scan_interval: float) -> int:
    """How many bulk wake-ups the relay keeps in Redis: `BULK_WINDOW_SCANS` scan intervals of the lane's pace (the
    rows the lane can send before the next scans refill it), at least `MIN_BULK_WINDOW`, at most the relay's
    window. Each scan reads, locks and checks every row of it: 2,000 rows (95 s of work at 21/s) made one scan take
    3-4 s on a loaded machine, and a new tenant's rows waited for it."""
    return max(1, min(relay_window, max(MIN_BULK_WINDOW, math.ceil(rate * scan_interval * BULK_WINDOW_SCANS))))


def gap_ms(flows_of_tenant: int) -> int:
    """Virtual time one job of a flow costs (whole milliseconds: arq scores in ms). Not weighted by a tenant's cap:
    a cap is a ceiling, not a share — weighted against the channel's nominal rate, a capped tenant would get far
    less than its cap whenever the lane runs below that rate (a loaded machine, a slow provider)."""
    return max(1, flows_of_tenant)


def reserve_ahead(rate: float) -> float:
    """How far ahead a capped tenant's job may hold its moment, sleeping in its worker slot: at most
    `SLEEPERS_PER_TENANT` of the tenant's jobs wait in slots at once, and none longer than `CAP_HORIZON_S`."""
    return min(CAP_HORIZON_S, SLEEPERS_PER_TENANT / rate)

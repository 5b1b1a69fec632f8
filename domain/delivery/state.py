"""What holds an owed row, in plain words: the delivery room's read model of every QUEUED row, and the one place
the message page, the recipient page, the ledger, search and `outbox why` take a queued message's answer from.

One pure decision, `owed_state` (the facts about one row and `now` in, an `OwedState` out), and one read,
`owed_states` (one statement for a whole page of rows: `sql_reads.OWED_STATES`). When several things apply, the one that
actually holds the row is said:

1. a live lease: a worker holds the row — "being sent now", and only then. It comes first: a pause or a breaker
   that came after the claim stops the next claim, not the send the worker holding the row is making;
2. its lane paused (every row of the lane waits): "waiting: lane paused since 08:56 UTC by pat";
3. its endpoint's breaker open: "waiting: endpoint's breaker open until 09:03:10 UTC";
4. its tenant's balance short of its price, for a row that holds no money yet: "waiting: balance empty since …";
5. its recipient's quiet hours (never the critical lane, never a webhook): "waiting: quiet hours until 08:00
   Asia/Kolkata";
6. due later: "retrying: attempt 3 failed (503), next try at 09:05:12 UTC", or "scheduled for …";
7. due, and nothing holds it: overdue, and by how much — "due 3 min ago, not yet picked up".

A row that is not owed (SENT, DELIVERED, FAILED, SUPPRESSED) has no owed state: its answer stays the ledger's
(domain/ledger/reasons.py). Times are UTC as every page prints them (with the date when it is not today's); quiet
hours end in the recipient's own zone too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, time
from typing import Any, Literal
from zoneinfo import ZoneInfo

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.delivery import sql_reads
from domain.ledger.floor import quiet_hours_end
from domain.ledger.reasons import error_text

OwedKind = Literal["sending", "waiting_paused", "waiting_breaker", "waiting_balance", "waiting_quiet_hours",
                   "retrying", "scheduled", "overdue"]


@dataclass(frozen=True)
class OwedFacts:
    """Everything that may hold one owed row, as `sql_reads.OWED_STATES` reads it."""

    id: int
    lane: str
    channel: str
    next_attempt_at: datetime
    leased_until: datetime | None = None
    last_error_class: str | None = None
    cost_cents: int = 0
    reserved_cents: int = 0
    endpoint_id: int | None = None
    lane_paused: bool = False
    paused_since: datetime | None = None
    paused_by: str | None = None
    breaker_open_until: datetime | None = None
    failure_streak: int = 0
    short_balance_cents: int | None = None  # the balance, only when it is short of this row's price
    short_since: datetime | None = None
    timezone: str | None = None
    quiet_start: time | None = None
    quiet_end: time | None = None
    failed_attempt_no: int | None = None
    failed_status_code: int | None = None

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> OwedFacts:
        return cls(**{f: m[f] for f in cls.__dataclass_fields__ if f in m})


@dataclass(frozen=True)
class OwedState:
    kind: OwedKind
    text: str  # the answer to "did they get it?", in plain words
    next_try: str  # when a try can come next, in plain words ("when the lane is resumed", a time)
    since: datetime | None = None
    until: datetime | None = None
    by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _clock(t: datetime, now: datetime, seconds: bool = False) -> str:
    """"08:56 UTC", or "2026-11-29 08:56 UTC" when it is not today (UTC)."""
    u = t.astimezone(UTC)
    day = "" if u.date() == now.astimezone(UTC).date() else f"{u:%Y-%m-%d} "
    return f"{day}{u:{'%H:%M:%S' if seconds else '%H:%M'}} UTC"


def _full(t: datetime) -> str:
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def span(seconds: float) -> str:
    """A length of time the way a person says it: "40 s", "3 min", "2 h 5 min", "3 days". Pure."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d = s // 86400
    return f"{d} day" if d == 1 else f"{d} days"


def _who(actor_ref: str) -> str:
    return actor_ref.removeprefix("operator:")


def _failed(f: OwedFacts) -> str:
    """"attempt 3 failed (503)": the last failed attempt, its HTTP status or, without one, what went wrong."""
    if not f.last_error_class:
        return ""
    why = str(f.failed_status_code) if f.failed_status_code is not None else error_text(f.last_error_class)
    if f.failed_attempt_no:
        return f"attempt {f.failed_attempt_no} failed ({why})"
    return f"the last attempt failed ({why})"


def _quiet_end(f: OwedFacts, at: datetime) -> datetime | None:
    """When the recipient's quiet hours holding `at` end; None when they do not hold it (the critical lane and
    webhooks never wait for them)."""
    if f.channel == "webhook" or f.lane == "critical" or not f.timezone:
        return None
    return quiet_hours_end(at, f.timezone, f.quiet_start, f.quiet_end)


def _local_end(f: OwedFacts, end: datetime, now: datetime) -> str:
    """"08:00 Asia/Kolkata (02:30 UTC)": the end of the recipient's quiet hours on their clock and on the page's."""
    assert f.timezone is not None
    return f"{end.astimezone(ZoneInfo(f.timezone)):%H:%M} {f.timezone} ({_clock(end, now)})"


def owed_state(f: OwedFacts, now: datetime) -> OwedState:
    """What holds this owed row now, and when it can be tried next (module docstring: the order). Pure."""
    if f.leased_until is not None and f.leased_until > now:
        return OwedState("sending", "being sent now", f"now: a worker holds it until {_full(f.leased_until)}",
                         until=f.leased_until)
    if f.lane_paused:
        since = f" since {_clock(f.paused_since, now)}" if f.paused_since else ""
        by = f" by {_who(f.paused_by)}" if f.paused_by else ""
        return OwedState("waiting_paused",
                         f"waiting: lane paused{since}{by} — nothing on the {f.lane} lane goes out until it is resumed",
                         "when the lane is resumed", since=f.paused_since,
                         by=_who(f.paused_by) if f.paused_by else None)
    if f.endpoint_id is not None and f.breaker_open_until is not None and f.breaker_open_until > now:
        return OwedState("waiting_breaker",
                         f"waiting: endpoint's breaker open until {_clock(f.breaker_open_until, now, seconds=True)} — "
                         f"endpoint {f.endpoint_id} failed {f.failure_streak} times in a row; then one try goes to "
                         "see whether it recovered", _full(f.breaker_open_until), until=f.breaker_open_until)
    if f.short_balance_cents is not None and f.reserved_cents == 0 and f.short_balance_cents < f.cost_cents:
        since = f" since {_clock(f.short_since, now)}" if f.short_since else ""
        what = "balance empty" if f.short_balance_cents <= 0 else \
            f"balance too low ({f.short_balance_cents / 100:,.2f} left, this message costs {f.cost_cents / 100:,.2f})"
        return OwedState("waiting_balance",
                         f"waiting: {what}{since} — it is not sent unless the balance is topped up before it is "
                         "picked up", "after a top-up", since=f.short_since)
    due = f.next_attempt_at
    end = _quiet_end(f, now)
    if end is not None and due <= end:
        return OwedState("waiting_quiet_hours", f"waiting: quiet hours until {_local_end(f, end, now)}", _full(end),
                         until=end)
    failed = _failed(f)
    if due > now:
        later = _quiet_end(f, due)
        then = f"; it comes due in quiet hours, which hold it until {_local_end(f, later, now)}" \
            if later is not None else ""
        if failed:
            return OwedState("retrying", f"retrying: {failed}, next try at {_clock(due, now, seconds=True)}{then}",
                             _full(due), until=due)
        return OwedState("scheduled", f"scheduled for {due.astimezone(UTC):%Y-%m-%d %H:%M} UTC{then}", _full(due),
                         until=due)
    late = (now - due).total_seconds()
    words = "due just now" if late < 1 else f"due {span(late)} ago"
    lost = f"; the worker that held it let its lease run out at {_clock(f.leased_until, now, seconds=True)}" \
        if f.leased_until is not None else ""
    return OwedState("overdue", f"{words}, not yet picked up" + (f" ({failed})" if failed else "") + lost,
                     f"was due {_full(due)}", since=due)


def read_states(uow: UnitOfWork, ids: Iterable[int], now: datetime,
                tenant_id: int | None = None) -> dict[int, OwedState]:
    """The owed state of each of `ids` that is owed (another tenant's, `tenant_id` given, is not answered), read
    in one statement in `uow`'s transaction."""
    wanted = sorted({int(i) for i in ids})
    if not wanted:
        return {}
    rows = uow.execute(sql_reads.OWED_STATES, {"ids": wanted, "tenant_id": tenant_id})
    return {int(r.id): owed_state(OwedFacts.from_mapping(dict(r._mapping)), now) for r in rows}


def owed_states(ids: Iterable[int], now: datetime, tenant_id: int | None = None,
                engine: Engine | None = None) -> dict[int, OwedState]:
    with UnitOfWork(engine) as uow:
        return read_states(uow, ids, now, tenant_id)


def with_states(rows: list[dict[str, Any]], now: datetime, tenant_id: int | None = None,
                engine: Engine | None = None) -> list[dict[str, Any]]:
    """`rows` (ledger rows: `id`, `status`), each owed one given its `state` (OwedState.as_dict) and its `answer`
    in the state's words; rows that are not owed are left as they are. One statement for all of them."""
    states = owed_states((r["id"] for r in rows if r.get("status") == "QUEUED"), now, tenant_id, engine)
    for r in rows:
        s = states.get(int(r["id"]))
        if s is not None:
            r["state"], r["answer"] = s.as_dict(), s.text
    return rows

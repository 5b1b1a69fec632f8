"""The steady load through the API (approvals, sends, one-time codes, lead events) and the side connection that
watches delivery, from which the recovery after the PostgreSQL restart is measured."""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg

from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from jobs.drills.chaos.owned import RATE_BEFORE_S, RATE_WINDOW_S, RECOVERED_SHARE, SAMPLE_EVERY, now_s


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    answers: Counter[str] = field(default_factory=Counter)  # "approve 200", "send ConnectError", …
    notification_ids: set[int] = field(default_factory=set)  # accepted sends and codes
    event_ids: set[str] = field(default_factory=set)  # accepted approvals

    def note(self, what: str, answer: str) -> None:
        with self.lock:
            self.answers[f"{what} {answer}"] += 1

    @property
    def accepted(self) -> int:
        return sum(n for k, n in self.answers.items() if k.split()[-1] in ("200", "201", "202"))

    @property
    def refused(self) -> int:
        return sum(self.answers.values()) - self.accepted


class Load:
    """Client threads driving the API at about `rate` requests per second in total; each thread has its own
    seeded generator. Refusals and connection errors (the API is killed, PostgreSQL restarts) are counted and
    the load goes on; only what the API accepted is tracked."""

    def __init__(self, api: str, key: str, seed: int, recipients: list[tuple[int, str]], rate: float,
                 threads: int = 2) -> None:
        self.api, self.key, self.seed, self.recipients = api, key, seed, recipients
        self.pause = threads / rate
        self.tally = Tally()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True, name=f"load-{i}")
                        for i in range(threads)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    def _run(self, i: int) -> None:
        rng = random.Random(f"{self.seed}:load:{i}")
        leads: dict[str, Any] = {"id": None, "step": 0}
        actions: list[tuple[Callable[[httpx.Client, random.Random, dict[str, Any]], None], float]] = [
            (self._approve, 3), (self._send, 3), (self._otp, 1.5), (self._lead_event, 2.5)]
        with httpx.Client(base_url=self.api, headers={"Authorization": f"Bearer {self.key}"}, timeout=5) as c:
            while not self.stop_event.is_set():
                action = rng.choices([a for a, _ in actions], [w for _, w in actions])[0]
                try:
                    action(c, rng, leads)
                except httpx.HTTPError as exc:
                    self.tally.note(action.__name__.strip("_"), type(exc).__name__)
                self.stop_event.wait(rng.expovariate(1 / self.pause))  # pacing between load steps

    def _post(self, c: httpx.Client, what: str, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        r = c.post(path, json=body)
        self.tally.note(what, str(r.status_code))
        answer: dict[str, Any] | None = r.json() if r.status_code in (200, 201, 202) else None
        return answer

    def _approve(self, c: httpx.Client, rng: random.Random, _: dict[str, Any]) -> None:
        _rid, ref = rng.choice(self.recipients)
        order = self._post(c, "create_order", "/api/v1/orders",
                           {"customer_ref": ref, "amount_cents": rng.randrange(500, 50_000), "currency": "EUR"})
        if order is None:
            return
        done = self._post(c, "approve", f"/api/v1/orders/{order['order_id']}/approve",
                          {"expected_revision": order["revision"], "request_id": f"chaos-{uuid.uuid4().hex}"})
        if done is not None:
            with self.tally.lock:
                self.tally.event_ids.add(str(done["event_id"]))

    def _track(self, answer: dict[str, Any] | None) -> None:
        if answer is not None:
            with self.tally.lock:
                self.tally.notification_ids.add(int(answer["notification_id"]))

    def _send(self, c: httpx.Client, rng: random.Random, _: dict[str, Any]) -> None:
        rid, _ref = rng.choice(self.recipients)
        self._track(self._post(c, "send", "/api/v1/notifications", {
            "recipient_id": rid, "channel": rng.choice(("email", "sms", "whatsapp")), "template": "offer",
            "lane": rng.choice(("high", "normal", "bulk")), "data": {"headline": "Chaos offer"},
            "subject_period": f"chaos-{uuid.uuid4().hex}"}))

    def _otp(self, c: httpx.Client, rng: random.Random, _: dict[str, Any]) -> None:
        rid, _ref = rng.choice(self.recipients)
        self._track(self._post(c, "otp", "/api/v1/otp", {"recipient_id": rid,
                                                         "channel": rng.choice(("sms", "whatsapp"))}))

    def _lead_event(self, c: httpx.Client, rng: random.Random, lead: dict[str, Any]) -> None:
        """Each thread walks one lead at a time forward through the funnel (with lifecycle events between);
        a lead at the end of the funnel is replaced by a new one."""
        if lead["id"] is None or lead["step"] >= len(JOURNEY_STEPS):
            _rid, ref = rng.choice(self.recipients)
            made = self._post(c, "new_lead", "/api/v1/leads", {"recipient_ref": ref, "advisor_ref": "chaos-advisor"})
            if made is None:
                return
            lead.update(id=made["lead_id"], step=0)
        event = rng.choice(LIFECYCLE_EVENTS) if rng.random() < 0.2 else JOURNEY_STEPS[lead["step"]]
        if self._post(c, "lead_event", f"/api/v1/leads/{lead['id']}/events",
                      {"event": event, "event_id": f"chaos-{uuid.uuid4().hex}"}) is not None \
                and event in JOURNEY_STEPS:
            lead["step"] += 1


SAMPLE_SQL = ("SELECT count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED')), "
              "count(*) FILTER (WHERE status IN ('SENT', 'DELIVERED') AND campaign_id IS NULL), "
              "count(*) FILTER (WHERE status = 'QUEUED') FROM notifications")


@dataclass(frozen=True)
class Sample:
    t: float
    sent: int
    steady_sent: int  # campaign rows apart: the steady load's own delivery
    owed: int


class Sampler:
    """Every 0.25 s from its own connection (reopened after PostgreSQL restarts): sent, steady sent, owed."""

    def __init__(self, url: str, t0: float) -> None:
        self.url, self.t0 = url.replace("postgresql+psycopg://", "postgresql://"), t0
        self.samples: list[Sample] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="sampler")
        self.conn: psycopg.Connection[Any] | None = None

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        if self.conn is not None:
            self.conn.close()

    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=1)
                row = self.conn.execute(SAMPLE_SQL).fetchone()
                assert row is not None
                self.samples.append(Sample(now_s(self.t0), int(row[0]), int(row[1]), int(row[2])))
            except psycopg.Error:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
            self.stop_event.wait(SAMPLE_EVERY)  # the sampling period


def steady_at(samples: list[Sample], t: float) -> int:
    """Steady rows sent by time t (the last sample at or before it)."""
    before = [s.steady_sent for s in samples if s.t <= t]
    return before[-1] if before else (samples[0].steady_sent if samples else 0)


def recovery_seconds(samples: list[Sample], down_at: float, up_at: float,
                     load_end: float) -> tuple[float, float | None]:
    """(rate before the restart, seconds from PostgreSQL accepting connections until the first window of
    RATE_WINDOW_S starting then delivers at RECOVERED_SHARE of that rate, and not before the first row sent after
    the restart — None if it never did before the load stopped). Resolution: the sampling period."""
    rate_before = (steady_at(samples, down_at) - steady_at(samples, down_at - RATE_BEFORE_S)) / RATE_BEFORE_S
    if rate_before <= 0:
        return rate_before, 0.0
    # Delivery is not back before the first row is sent again (a backlog burst late in a window must not make
    # the window's start look recovered): the answer is never earlier than the first sample that saw one.
    before_down = steady_at(samples, down_at)
    first = next((s.t for s in samples if s.t >= up_at and s.steady_sent > before_down), None)
    if first is None:
        return rate_before, None
    for s in samples:
        if s.t < up_at:
            continue
        if s.t + RATE_WINDOW_S > load_end:
            break
        if (steady_at(samples, s.t + RATE_WINDOW_S) - s.steady_sent) / RATE_WINDOW_S >= RECOVERED_SHARE * rate_before:
            return rate_before, max(0.0, s.t - up_at, first - up_at)
    return rate_before, None

"""Demo data: tenant 42 (order 913 authorized at revision 17, two dozen more, on-call, operator, support), tenant 7,
and a platform on-call operator who belongs to no tenant."""

from __future__ import annotations

import functools
import random
from datetime import time
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from domain.access.auth import hash_password
from domain.db import UnitOfWork
from domain.delivery.queue import LANES
from domain.journeys.steps import JOURNEY_STEPS, LIFECYCLE_EVENTS
from domain.ledger.metering import DEFAULT_PRICE_CENTS

DEMO_PASSWORD = "outbox-demo"
_PEOPLE = ("email", "sms", "whatsapp")
# Stored, versioned text (version 1 here); `{name}` is filled from the message's data at send time.
TEMPLATES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("order_update", _PEOPLE, "Your order {order_id} is now {status}."),
    ("otp_code", ("sms", "whatsapp"), "Your code is {code}. It expires in 10 minutes."),
    ("offer", _PEOPLE, "{headline} Reply STOP to opt out."),
    *((f"nudge_{step}", ("whatsapp", "email"), f"Pick up where you left off: {step.replace('_', ' ')}.")
      for step in JOURNEY_STEPS),
    *((event, ("whatsapp", "email"), f"Good news: {event.replace('_', ' ')}.") for event in LIFECYCLE_EVENTS),
)
OPERATORS: tuple[tuple[int | None, str, str, str], ...] = (
    (None, "pat", "Pat Rivera", "platform"),  # platform on-call: lanes and fault switches, no tenant
    (42, "alice", "Alice Moreau", "oncall"),
    (42, "bob", "Bob Okafor", "operator"),
    (42, "sam", "Sam Ito", "support"),  # support: reads everything of tenant 42, changes nothing
    (7, "carol", "Carol Lindqvist", "operator"),
)


def _inserted(result: sa.Result[Any]) -> int:
    return int(cast(sa.CursorResult[Any], result).rowcount)


@functools.cache
def _demo_password_hash() -> str:
    """The demo operators' argon2 hash, made once per process: argon2 is expensive by design (≈ 0.1-0.3 s of CPU),
    and the test suite seeds a fresh database for every test; each hash carries its own salt, so one per process
    is as good as one per seed."""
    return hash_password(DEMO_PASSWORD)


def seed(engine: Engine | None = None, *, seed_value: int = 42) -> dict[str, int]:
    rng = random.Random(seed_value)
    pw = _demo_password_hash()
    created = {"tenants": 0, "orders": 0, "operators": 0}
    with UnitOfWork(engine) as uow:
        x = uow.execute
        for tid, name in ((42, "Northwind Retail"), (7, "Contoso Foods")):
            created["tenants"] += _inserted(x(sa.text(
                "INSERT INTO tenants (id, name) VALUES (:i, :n) ON CONFLICT DO NOTHING"), {"i": tid, "n": name}
            ))
            opened = x(sa.text(
                "INSERT INTO balances (tenant_id, balance_cents) VALUES (:t, 50000) ON CONFLICT DO NOTHING "
                "RETURNING balance_cents"), {"t": tid}).first()
            if opened is not None:  # every cent of a balance is an entry (invariant 7)
                x(sa.text("INSERT INTO balance_entries (tenant_id, kind, amount_cents, reason, reference) "
                          "VALUES (:t, 'opening', :a, 'opening balance (demo)', 'opening')"),
                  {"t": tid, "a": opened.balance_cents})
            for channel, price in DEFAULT_PRICE_CENTS.items():
                x(sa.text("INSERT INTO channel_prices (tenant_id, channel, price_cents) VALUES (:t, :c, :p) "
                          "ON CONFLICT DO NOTHING"), {"t": tid, "c": channel, "p": price})
        for home, login, display, role in OPERATORS:
            created["operators"] += _inserted(x(sa.text(
                "INSERT INTO operators (tenant_id, login, display_name, password_hash, role) "
                "VALUES (:t, :l, :d, :p, :r) ON CONFLICT (login) DO UPDATE SET role = EXCLUDED.role, "
                "tenant_id = EXCLUDED.tenant_id WHERE operators.role <> EXCLUDED.role"),
                {"t": home, "l": login, "d": display, "p": pw, "r": role}))
        for name, channels, body in TEMPLATES:
            x(sa.text("INSERT INTO templates (name, version, channels, body) VALUES (:n, 1, :c, :b) "
                      "ON CONFLICT (name, version) DO NOTHING"), {"n": name, "c": list(channels), "b": body})
        for lane in LANES:
            x(sa.text("INSERT INTO lane_controls (lane, paused) VALUES (:l, false) ON CONFLICT DO NOTHING"),
              {"l": lane})
        customers = {42: [f"cust-{i:03d}" for i in range(1, 9)], 7: [f"c7-{i:03d}" for i in range(1, 4)]}
        for tid, refs in customers.items():
            for ref in refs:
                x(sa.text(
                    "INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, quiet_start, "
                    "quiet_end, daily_cap) VALUES (:t, :r, :d, :e, :p, :tz, :qs, :qe, 10) "
                    "ON CONFLICT DO NOTHING"),
                    {"t": tid, "r": ref, "d": f"Customer {ref}", "e": f"{ref}@example.test",
                     "p": f"+1555{rng.randrange(10**6, 10**7)}", "tz": "UTC", "qs": None, "qe": None})
        x(sa.text(
            "INSERT INTO recipients (tenant_id, ref, display_name, email, timezone) "
            "VALUES (42, 'advisor-anna', 'Anna (sales advisor)', 'anna@northwind.example.test', 'UTC') "
            "ON CONFLICT DO NOTHING"))
        if not x(sa.text("SELECT 1 FROM leads WHERE tenant_id = 42 LIMIT 1")).first():
            for ref in customers[42][2:6]:
                x(sa.text("INSERT INTO leads (tenant_id, recipient_ref, advisor_ref) VALUES (42, :r, 'advisor-anna')"),
                  {"r": ref})
            x(sa.text("INSERT INTO leads (tenant_id, recipient_ref) VALUES (7, 'c7-001')"))
        # Someone in India who asked for no messages 22:00-08:00 their time, and who opted out of SMS.
        x(sa.text(
            "INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, quiet_start, quiet_end, "
            "daily_cap, opted_out_channels) VALUES (42, 'cust-kolkata', 'Asha Rao', 'asha@example.test', "
            "'+919800000001', 'Asia/Kolkata', :qs, :qe, 5, '{sms}') ON CONFLICT DO NOTHING"),
            {"qs": time(22, 0), "qe": time(8, 0)})
        # A recipient who sleeps 22:00-07:00 in Tokyo, for quiet-hour demos.
        x(sa.text(
            "INSERT INTO recipients (tenant_id, ref, display_name, email, timezone, quiet_start, quiet_end, "
            "daily_cap) VALUES (42, 'cust-night', 'Night Owl', 'night@example.test', 'Asia/Tokyo', :qs, :qe, 3) "
            "ON CONFLICT DO NOTHING"), {"qs": time(22, 0), "qe": time(7, 0)})

        def order(tid: int, oid: int | None, rev: int, ref: str, amount: int, status: str = "authorized") -> None:
            cols = "tenant_id, status, revision, base_revision, customer_ref, amount_cents, currency"
            vals = ":t, :s, :r, :r, :c, :a, 'EUR'"
            if oid is not None:
                cols, vals = "id, " + cols, ":id, " + vals
            created["orders"] += _inserted(x(sa.text(f"INSERT INTO orders ({cols}) VALUES ({vals}) "
                                                     "ON CONFLICT DO NOTHING"),
                                             {"id": oid, "t": tid, "s": status, "r": rev, "c": ref, "a": amount}))

        order(42, 913, 17, "cust-001", 12_900)
        for i in range(24):
            order(42, 914 + i, rng.randrange(1, 20), rng.choice(customers[42]), rng.randrange(500, 90_000),
                  rng.choice(("authorized",) * 4 + ("approved", "cancelled")))
        for i in range(6):
            order(7, 700 + i, rng.randrange(1, 9), rng.choice(customers[7]), rng.randrange(500, 20_000))
        x(sa.text("SELECT setval(pg_get_serial_sequence('orders', 'id'), "
                  "greatest(10000, (SELECT max(id) FROM orders)))"))
        uow.commit()
    return created


BASE_TIMEZONES = ("UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/Sao_Paulo", "Asia/Kolkata",
                  "Asia/Tokyo", "Australia/Sydney", "Africa/Lagos", "Asia/Singapore")


def seed_recipients(n: int, tenant_id: int = 42, engine: Engine | None = None) -> int:
    """A realistic recipient base for campaigns: `bulk-000001` … spread over ten timezones; about 1 in 20 opted out
    of SMS and 1 in 25 of email, 1 in 30 without a phone and 1 in 40 without an email, 1 in 8 with quiet hours
    22:00-07:00, a daily cap of 10. Idempotent (existing refs are kept). Returns rows added."""
    with UnitOfWork(engine) as uow:
        added = _inserted(uow.execute(sa.text(
            """
            INSERT INTO recipients (tenant_id, ref, display_name, email, phone, timezone, quiet_start, quiet_end,
                                    daily_cap, opted_out_channels)
            SELECT :t, 'bulk-' || lpad(g::text, 6, '0'), 'Customer ' || g,
                   CASE WHEN g % 40 = 0 THEN NULL ELSE 'bulk' || g || '@example.test' END,
                   CASE WHEN g % 30 = 0 THEN NULL ELSE '+1555' || lpad(g::text, 7, '0') END,
                   (CAST(:zones AS text[]))[1 + g % array_length(CAST(:zones AS text[]), 1)],
                   CASE WHEN g % 8 = 0 THEN time '22:00' END, CASE WHEN g % 8 = 0 THEN time '07:00' END,
                   10,
                   CASE WHEN g % 20 = 0 THEN ARRAY['sms'] WHEN g % 25 = 0 THEN ARRAY['email']
                        ELSE ARRAY[]::text[] END
            FROM generate_series(1, :n) AS g
            ON CONFLICT (tenant_id, ref) DO NOTHING
            """), {"t": tenant_id, "n": n, "zones": list(BASE_TIMEZONES)}))
        uow.commit()
    return added


def seed_journeys(engine: Engine | None = None) -> int:
    """Put the demo leads mid-journey (once): one just started, one past the credit check, one looking at offers,
    one that already heard good news. Returns events recorded (0 when they were already there)."""
    from domain.journeys.store import record_lead_event

    with UnitOfWork(engine) as uow:
        leads = [int(i) for i in uow.execute(sa.text(
            "SELECT id FROM leads WHERE tenant_id = 42 AND current_step IS NULL ORDER BY id")).scalars()]
    plans = (("initiated",), ("initiated", "phone_verified", "credit_check_done"),
             ("initiated", "credit_check_done", "savings_explored", "offers_viewed"),
             ("initiated", "phone_verified", "loan_sanctioned"))
    n = 0
    for lead, plan in zip(leads, plans, strict=False):
        for event in plan:
            record_lead_event(42, lead, event, engine=engine, event_id=f"demo-{lead}-{event}")
            n += 1
    return n

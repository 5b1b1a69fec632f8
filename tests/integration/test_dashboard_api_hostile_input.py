"""Hostile input against the real ASGI API on real PostgreSQL and Redis.

Invariants: a string PostgreSQL cannot store (a NUL, a lone surrogate) or a number JSON has no room for, in ANY field
of ANY write endpoint, is answered 4xx JSON naming the field, and changes nothing; quiet hours take an IANA zone,
never a bare offset; a cursor beyond bigint is a 422, never a database error.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import sqlalchemy as sa

from dashboard.api.app import build_api
from domain.db import get_engine

NUL, SURROGATE = "a\u0000b", "\ud800"


def fingerprint() -> dict[str, str]:
    """Every row of every table of ours, hashed: equal before and after means nothing changed. Not the chart
    points, which the session's relay keeps on its own clock (once a minute), whatever a request does."""
    with get_engine().connect() as c:
        tables = c.execute(sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                   "AND tablename NOT IN ('alembic_version', 'ops_series_points') "
                                   "ORDER BY tablename")).scalars().all()
        return {t: c.execute(sa.text(f'SELECT md5(coalesce(string_agg(x::text, \'|\' ORDER BY x::text), \'\')) '
                                     f'FROM "{t}" x')).scalar_one() for t in tables}


def post_raw(client: httpx.AsyncClient, method: str, url: str, body: Any, headers: dict[str, str]) -> Any:
    """JSON written by hand (ASCII escapes): httpx would refuse to encode a lone surrogate itself."""
    return client.request(method, url, content=json.dumps(body).encode(),
                          headers={**headers, "content-type": "application/json"})


def _deref(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def string_fields(spec: dict[str, Any], schema: dict[str, Any], path: str = "") -> list[tuple[str, str]]:
    """(dotted path, kind) of every string a body may carry: "str" a string property, "map" an object of free
    keys and values (a send's `data`), found through $ref, anyOf and arrays."""
    schema = _deref(spec, schema)
    out: list[tuple[str, str]] = []
    for alt in schema.get("anyOf", []):
        out += string_fields(spec, alt, path)
    if schema.get("type") == "string":
        out.append((path, "str"))
    if schema.get("type") == "array" and "items" in schema:
        out += [(p, "list:" + k) for p, k in string_fields(spec, schema["items"], path)]
    if schema.get("type") == "object":
        for name, sub in schema.get("properties", {}).items():
            out += string_fields(spec, sub, f"{path}.{name}" if path else name)
        if schema.get("additionalProperties") not in (None, False) and not schema.get("properties"):
            out.append((path, "map"))
    return sorted(set(out))


def set_at(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(body))
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[leaf] = value
    return out


async def _fixtures(client: httpx.AsyncClient, key: dict[str, str]) -> dict[str, Any]:
    """Real rows for the path parameters of tenant 42 (seeded order 913, recipient cust-001)."""
    from domain.ledger import recipients

    ((_, rid),) = recipients.find_by_ref(42, "cust-001")
    lead = (await client.post("/api/v1/leads", json={"recipient_ref": "cust-001"}, headers=key)).json()["lead_id"]
    otp = await client.post("/api/v1/otp", json={"recipient_id": rid, "channel": "sms"}, headers=key)
    assert otp.status_code == 201, otp.text
    camp = await client.post("/api/v1/campaigns", json={"name": "Winter", "segment": "all_reachable",
                                                        "template": "offer", "channel": "email"}, headers=key)
    assert camp.status_code == 202, camp.text
    ep = await client.post("/api/v1/endpoints", json={"url": "http://93.184.216.34/sweep"}, headers=key)
    assert ep.status_code == 201, ep.text
    return {"order_id": 913, "recipient_id": rid, "lead_id": lead,
            "notification_id": otp.json()["notification_id"], "campaign_id": camp.json()["campaign_id"],
            "endpoint_id": ep.json()["id"]}


def valid_bodies(ids: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One valid body per write operation. A new write endpoint makes the sweep fail until it has one here."""
    transition = {"expected_revision": 17, "request_id": "req-sweep"}
    return {
        "POST /api/v1/orders": {"customer_ref": "cust-002", "amount_cents": 100, "currency": "EUR"},
        "POST /api/v1/orders/{order_id}/approve": transition,
        "POST /api/v1/orders/{order_id}/cancel": transition,
        "POST /api/v1/orders/{order_id}/fulfill": transition,
        "POST /api/v1/leads": {"recipient_ref": "cust-001", "advisor_ref": "adv-1"},
        "POST /api/v1/leads/{lead_id}/events": {"event": "initiated", "event_id": "ev-sweep",
                                                "occurred_at": "2026-11-29T10:00:00+00:00"},
        "POST /api/v1/recipients": {"ref": "cust-sweep", "display_name": "Asha", "email": "a@example.com",
                                    "phone": "+919800000000", "timezone": "Asia/Kolkata",
                                    "quiet_hours": {"start": "22:00", "end": "08:00"}, "daily_cap": 5,
                                    "opted_out_channels": ["sms"]},
        "PATCH /api/v1/recipients/{recipient_id}": {"display_name": "Asha", "email": "a@example.com",
                                                    "phone": "+919800000000", "timezone": "Asia/Kolkata",
                                                    "quiet_hours": {"start": "22:00", "end": "08:00"},
                                                    "daily_cap": 5, "opted_out_channels": ["sms"]},
        "POST /api/v1/notifications": {"recipient_id": ids["recipient_id"], "channel": "email", "template": "offer",
                                       "data": {"headline": "10% off"}, "subject_period": "2026-11-29"},
        "POST /api/v1/otp": {"recipient_id": ids["recipient_id"], "channel": "sms"},
        "POST /api/v1/otp/{notification_id}/verify": {"code": "123456"},
        "POST /api/v1/campaigns": {"name": "Spring", "segment": "all_reachable", "template": "offer",
                                   "channel": "email"},
        "POST /api/v1/balance/top-ups": {"amount_cents": 100, "reference": "INV-sweep"},
        "POST /api/v1/endpoints": {"url": "https://hooks.example.com/outbox", "description": "ERP",
                                   "event_types": ["order.approved"]},
        "POST /api/v1/search": {"q": "cust-001"},
        # The confirmed actions' optional note (issue 27): swept like any other string.
        "POST /api/v1/endpoints/{endpoint_id}/disable": {"note": "sweep"},
        "POST /api/v1/endpoints/{endpoint_id}/enable": {"note": "sweep"},
        "POST /api/v1/endpoints/{endpoint_id}/rotate": {"note": "sweep"},
        "POST /api/v1/campaigns/{campaign_id}/cancel": {"note": "sweep"},
    }


async def test_every_string_of_every_write_endpoint_refuses_nul_and_lone_surrogates(client, key42):
    """Invariant: a NUL or a lone surrogate in any string (object keys included) of any write endpoint — found
    from the OpenAPI schema, so a new endpoint or field is swept too — answers 422 JSON naming the field, with a
    request id, and changes no row of any table."""
    spec = (await client.get("/api/openapi.json")).json()
    ids = await _fixtures(client, key42)
    bodies = valid_bodies(ids)
    swept: list[str] = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            body_schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if method not in ("post", "put", "patch") or body_schema is None:
                continue
            name = f"{method.upper()} {path}"
            assert name in bodies, f"{name} is a write endpoint with no valid example in valid_bodies()"
            url = path.format(**ids)
            for field, kind in string_fields(spec, body_schema):
                for bad in (NUL, SURROGATE):
                    if kind == "map":
                        cases = [(set_at(bodies[name], field, {bad: "x"}), field),
                                 (set_at(bodies[name], field, {"k": bad}), f"{field}.k"),
                                 (set_at(bodies[name], field, {"k": {"deep": [bad]}}), f"{field}.k.deep[0]")]
                    elif kind.startswith("list:"):
                        cases = [(set_at(bodies[name], field, [bad]), f"{field}[0]")]
                    else:
                        cases = [(set_at(bodies[name], field, bad), field)]
                    for body, named in cases:
                        before = fingerprint()
                        r = await post_raw(client, method.upper(), url, body, key42)
                        assert 400 <= r.status_code < 500, f"{name} {field}={bad!r}: {r.status_code} {r.text}"
                        got = r.json()
                        assert got["field"] == named, f"{name}: {got}"
                        assert got["request_id"] == r.headers["X-Request-Id"]
                        assert fingerprint() == before, f"{name} {field}={bad!r} changed the database"
                        swept.append(f"{name} {named}")
    for must in ("POST /api/v1/recipients display_name", "POST /api/v1/recipients email",
                 "POST /api/v1/notifications data.k", "POST /api/v1/notifications subject_period",
                 "POST /api/v1/campaigns name", "POST /api/v1/orders/{order_id}/approve request_id",
                 "PATCH /api/v1/recipients/{recipient_id} quiet_hours.start"):
        assert must in swept, f"the sweep missed {must}"


async def test_a_signed_receipt_with_a_nul_or_lone_surrogate_is_refused_naming_the_field(client):
    """Invariant: a correctly signed receipt whose provider_reference (or any string) PostgreSQL cannot store is
    a 422 naming the field, never a 500, and keeps nothing."""
    from domain.delivery.signing import signed_headers
    from domain.settings import get_settings

    for bad in (NUL, SURROGATE):
        body = json.dumps({"receipt_id": "rcpt-1", "provider_reference": bad, "outcome": "delivered"})
        before = fingerprint()
        r = await client.post("/api/v1/receipts/sms", content=body.encode(), headers={
            **signed_headers(get_settings().receipt_secret, "rcpt-1", body), "content-type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "provider_reference", r.text
        assert fingerprint() == before


async def test_non_finite_numbers_in_a_sends_data_are_refused(client, key42):
    """Invariant: NaN, Infinity and numbers too large for a double (Python's json reads them all) are not JSON
    PostgreSQL can keep: 422 naming the field, nothing written."""
    from domain.ledger import recipients

    ((_, rid),) = recipients.find_by_ref(42, "cust-001")
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        before = fingerprint()
        raw = (f'{{"recipient_id": {rid}, "channel": "email", "template": "offer", "subject_period": "p", '
               f'"data": {{"n": {literal}}}}}')
        r = await client.post("/api/v1/notifications", content=raw.encode(),
                              headers={**key42, "content-type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "data.n", r.text
        assert fingerprint() == before


async def test_quiet_hours_take_an_iana_zone_never_an_offset(client, key42):
    """Invariant: quiet hours are times of day in the recipient's IANA timezone: a time with an offset (in range
    or not) and an offset given as the zone are refused, naming the field, and change nothing (an offset was
    silently dropped, and one out of range was a 500)."""
    from domain.ledger import recipients

    ((_, rid),) = recipients.find_by_ref(42, "cust-001")
    base = {"ref": "cust-tz", "display_name": "Asha", "email": "a@example.com", "timezone": "Asia/Kolkata"}
    cases = [({"quiet_hours": {"start": "18:15:23+20:04", "end": "08:00"}}, "quiet_hours.start"),
             ({"quiet_hours": {"start": "22:00", "end": "08:00+05:30"}}, "quiet_hours.end"),
             ({"quiet_hours": {"start": "22:00Z", "end": "08:00"}}, "quiet_hours.start"),
             ({"timezone": "+05:30"}, "timezone"), ({"timezone": "UTC+05:30"}, "timezone")]
    for extra, field in cases:
        before = fingerprint()
        made = await client.post("/api/v1/recipients", json={**base, **extra}, headers=key42)
        changed = await client.patch(f"/api/v1/recipients/{rid}", json=extra, headers=key42)
        for r in (made, changed):
            assert r.status_code == 422 and r.json()["field"] == field, (extra, r.text)
        assert fingerprint() == before
    ok = await client.post("/api/v1/recipients", json={**base, "quiet_hours": {"start": "22:00", "end": "08:00"}},
                           headers=key42)
    assert ok.status_code == 201 and ok.json()["quiet_start"].startswith("22:00"), "a plain time of day still works"


async def test_a_cursor_beyond_bigint_is_a_422_not_a_database_error(client, key42):
    """Invariant: ids and cursors beyond what their column holds are refused at the edge (422 naming the
    parameter), never sent to PostgreSQL; the largest bigint is still a valid cursor."""
    from domain.ledger import recipients

    ((_, rid),) = recipients.find_by_ref(42, "cust-001")
    r = await client.get(f"/api/v1/recipients/{rid}/messages?before_id=9223372036854775808", headers=key42)
    assert r.status_code == 422 and r.json()["field"] == "before_id", r.text
    assert (await client.get(f"/api/v1/recipients/{rid}/messages?before_id={2**63 - 1}",
                             headers=key42)).status_code == 200
    for url in ("/api/v1/orders/2147483648", "/api/v1/recipients/99999999999999999999",
                "/api/v1/notifications/-1"):
        assert (await client.get(url, headers=key42)).status_code == 422, url
    r = await client.post("/api/v1/orders/913/approve", json={"expected_revision": 2**63, "request_id": "r"},
                          headers=key42)
    assert r.status_code == 422 and r.json()["field"] == "expected_revision"
    r = await client.post("/api/v1/orders/913/approve", json={"expected_revision": True, "request_id": "r"},
                          headers=key42)
    assert r.status_code == 422, "a JSON boolean is not an integer"


async def test_nul_in_a_query_string_is_refused_naming_the_parameter(client, key42):
    """Invariant: query strings are swept like bodies."""
    r = await client.get("/api/v1/orders?status=a%00b", headers=key42)
    assert r.status_code == 422 and r.json()["field"] == "status"


def test_the_production_app_is_built_with_the_same_guards(db):
    """Invariant: the layers are part of the app every deployment builds (standalone and inside Reflex)."""
    from dashboard.api.guard import ApiKeyGate, HostileInput, RequestContext
    from dashboard.api.idempotency import Idempotency
    from dashboard.limits import BodyLimit

    api = build_api()
    assert [m.cls for m in api.user_middleware] == [RequestContext, ApiKeyGate, BodyLimit, HostileInput,
                                                    Idempotency]

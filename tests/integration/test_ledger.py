"""One ledger, exactly metered — on real PostgreSQL, through the real ASGI app and the worker's own store.

Invariants: the same dedupe key is one row whatever the concurrency (and never a 5xx); money and the daily cap are
taken with guarded updates at claim, so with money for N exactly N are sent and the cap fires at exactly N+1;
balance entries always sum to the balance; a failed delivery is refunded; receipts are applied once, in any order;
a scheduled message is never counted as overdue; an opt-out set through the API suppresses with its reason.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from domain.access.auth import create_api_key
from domain.db import get_engine
from domain.delivery import long_way, plan
from domain.delivery import views as delivery_views
from domain.delivery.receipts import apply_receipt
from domain.delivery.retry import Fail, Succeeded
from tests.support.db import assert_invariants, one
from tests.support.ledger import new_recipient, send_body, set_balance


async def test_thirty_identical_concurrent_sends_make_one_row_and_no_5xx(client, key42):
    rid = await new_recipient(client, key42)
    answers = await asyncio.gather(*(client.post("/api/v1/notifications", json=send_body(rid), headers=key42)
                                     for _ in range(30)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] * 29 + [201], codes
    assert len({r.json()["notification_id"] for r in answers}) == 1
    assert one("SELECT count(*) FROM notifications WHERE recipient <> 'webhook:tenant-42' "
               "AND template = 'offer'") == 1


async def test_send_api_refuses_bad_input_and_changes_nothing(client, key42, key7):
    rid = await new_recipient(client, key42)
    before = one("SELECT count(*) FROM notifications")
    bad = [({**send_body(rid), "template": "no_such"}, 422, "unknown_template"),
           ({**send_body(rid, channel="email"), "template": "otp_code"}, 422, "channel_not_in_template"),
           ({**send_body(rid), "lane": "critical"}, 422, "invalid_request"),
           ({**send_body(rid), "channel": "fax"}, 422, "invalid_request")]
    for body, status, code in bad:
        r = await client.post("/api/v1/notifications", json=body, headers=key42)
        assert (r.status_code, r.json()["error"]) == (status, code), r.text
    foreign = await client.post("/api/v1/notifications", json=send_body(rid), headers=key7)
    missing = await client.post("/api/v1/notifications", json=send_body(2**31 - 1), headers=key7)
    assert foreign.status_code == missing.status_code == 404
    assert {**foreign.json(), "request_id": ""} == {**missing.json(), "request_id": ""}  # only the request id differs
    assert one("SELECT count(*) FROM notifications") == before


async def test_notification_detail_shows_attempts_cost_and_next_retry(client, key42):
    rid = await new_recipient(client, key42)
    nid = (await client.post("/api/v1/notifications", json=send_body(rid), headers=key42)).json()["notification_id"]
    d = (await client.get(f"/api/v1/notifications/{nid}", headers=key42)).json()
    assert d["status"] == "QUEUED" and d["cost_cents"] == 5 and d["attempt_log"] == []
    # No worker holds it: it is due and says so, never "being sent now" (issue 27: only a live lease is that).
    assert d["next_retry_at"] is not None and d["answer"].endswith("not yet picked up"), d["answer"]
    assert d["state"]["kind"] == "overdue"
    other = await client.get(f"/api/v1/notifications/{nid}", headers={
        "Authorization": f"Bearer {create_api_key(7)}"})
    assert other.status_code == 404


def _claim_all(ids: list[int]) -> list[plan.ClaimResult | None]:
    now = datetime.now(UTC)
    with ThreadPoolExecutor(max_workers=len(ids)) as pool:
        return list(pool.map(lambda i: long_way.claim(i, 30, now, "test-worker"), ids))


def _record_sent(results: list[plan.ClaimResult | None]) -> None:
    for r in results:
        if isinstance(r, plan.Ready):
            long_way.record(r.claim, Succeeded(already_processed=False), worker="test", started=datetime.now(UTC),
                            status_code=201, latency_ms=1.0, provider_reference=f"sms-{r.claim.id}")


async def _twenty(client, key42, **recipient) -> list[int]:  # type: ignore[no-untyped-def]
    rid = await new_recipient(client, key42, **recipient)
    ids = []
    for i in range(20):
        r = await client.post("/api/v1/notifications", json=send_body(rid, f"p-{i}"), headers=key42)
        ids.append(r.json()["notification_id"])
    return ids


async def test_money_for_ten_of_twenty_concurrent_sends_sends_exactly_ten(client, key42):
    ids = await _twenty(client, key42)
    set_balance(42, 10 * 5)  # an SMS costs 5 cents
    results = await asyncio.to_thread(_claim_all, ids)
    ready = [r for r in results if isinstance(r, plan.Ready)]
    refused = [r for r in results if isinstance(r, plan.Suppressed)]
    assert len(ready) == 10 and len(refused) == 10
    assert {r.reason for r in refused} == {"insufficient_balance"}
    await asyncio.to_thread(_record_sent, results)
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == 0
    assert one("SELECT count(*) FROM notifications WHERE id = ANY(:i) AND status = 'SENT' AND reserved_cents = 5",
               i=ids) == 10
    assert one("SELECT coalesce(sum(amount_cents), 0) FROM balance_entries WHERE notification_id = ANY(:i)",
               i=ids) == -50
    assert_invariants()


async def test_daily_cap_fires_at_exactly_n_plus_one_under_concurrency(client, key42):
    ids = await _twenty(client, key42, daily_cap=7)
    results = await asyncio.to_thread(_claim_all, ids)
    assert sum(isinstance(r, plan.Ready) for r in results) == 7
    assert [r.reason for r in results if isinstance(r, plan.Suppressed)] == ["daily_cap"] * 13
    assert_invariants()


async def test_permanent_failure_refunds_in_the_same_transaction(client, key42):
    ids = await _twenty(client, key42)
    before = one("SELECT balance_cents FROM balances WHERE tenant_id = 42")
    (r,) = await asyncio.to_thread(_claim_all, ids[:1])
    assert isinstance(r, plan.Ready)
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == before - 5
    long_way.record(r.claim, Fail("contract", review=True), worker="t", started=datetime.now(UTC), status_code=422,
                    latency_ms=1.0, provider_reference=None)
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == before
    assert one("SELECT review FROM notifications WHERE id = :i", i=ids[0]) == "needs_review"
    assert_invariants()


async def test_exhausted_retries_fail_without_review(client, key42):
    ids = await _twenty(client, key42)
    (r,) = await asyncio.to_thread(_claim_all, ids[:1])
    assert isinstance(r, plan.Ready)
    long_way.record(r.claim, Fail("server_error", review=False), worker="t", started=datetime.now(UTC),
                    status_code=503, latency_ms=1.0, provider_reference=None)
    assert one("SELECT status || ':' || coalesce(review, 'none') FROM notifications WHERE id = :i",
               i=ids[0]) == "FAILED:none"


async def test_receipts_out_of_order_replayed_failed_and_unknown(client, key42):
    ids = await _twenty(client, key42)
    key = one("SELECT dedupe_key FROM notifications WHERE id = :i", i=ids[0])
    (r,) = await asyncio.to_thread(_claim_all, ids[:1])
    assert isinstance(r, plan.Ready)
    # Delivered before the send is acknowledged: the truth at once (the worker's own record then finds it done).
    early = apply_receipt("sms", "rc-1", "sms-ref-1", "delivered", key)
    assert early.status == "applied"
    assert one("SELECT status FROM notifications WHERE id = :i", i=ids[0]) == "DELIVERED"
    assert long_way.record(r.claim, Succeeded(False), worker="t", started=datetime.now(UTC), status_code=201,
                           latency_ms=1.0, provider_reference="sms-ref-1") == "already_recorded"
    assert one("SELECT status FROM notifications WHERE id = :i", i=ids[0]) == "DELIVERED"
    assert apply_receipt("sms", "rc-1", "sms-ref-1", "delivered", key).status == "duplicate"
    # A failed receipt settles FAILED and refunds.
    (r2,) = await asyncio.to_thread(_claim_all, ids[1:2])
    assert isinstance(r2, plan.Ready)
    long_way.record(r2.claim, Succeeded(False), worker="t", started=datetime.now(UTC), status_code=201,
                    latency_ms=1.0, provider_reference="sms-ref-2")
    before = one("SELECT balance_cents FROM balances WHERE tenant_id = 42")
    assert apply_receipt("sms", "rc-2", "sms-ref-2", "failed").status == "applied"
    assert one("SELECT status FROM notifications WHERE id = :i", i=ids[1]) == "FAILED"
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == before + 5
    # Unknown reference: 404 to the provider, and kept as it arrived.
    assert apply_receipt("sms", "rc-3", "sms-nobody", "delivered").status == "unknown_reference"
    assert one("SELECT count(*) FROM delivery_receipts WHERE provider_reference = 'sms-nobody'") == 1
    assert_invariants()


async def test_top_ups_past_the_balance_ceiling_are_refused_and_change_nothing(client, key42):
    """Invariant: a credit that would overflow the balance answers 422 `balance_limit` (it was a 500: integer out
    of range, found by schemathesis) and credits nothing; a reference credited before still answers 200."""
    big = {"amount_cents": 10**9}
    for i in range(2):
        r = await client.post("/api/v1/balance/top-ups", json={**big, "reference": f"big-{i}"}, headers=key42)
        assert r.status_code == 201, r.text
    before = one("SELECT balance_cents FROM balances WHERE tenant_id = 42")
    entries = one("SELECT count(*) FROM balance_entries WHERE tenant_id = 42")
    r = await client.post("/api/v1/balance/top-ups", json={**big, "reference": "big-2"}, headers=key42)
    assert r.status_code == 422 and r.json()["error"] == "balance_limit" and r.json()["field"] == "amount_cents"
    assert one("SELECT balance_cents FROM balances WHERE tenant_id = 42") == before
    assert one("SELECT count(*) FROM balance_entries WHERE tenant_id = 42") == entries
    again = await client.post("/api/v1/balance/top-ups", json={**big, "reference": "big-1"}, headers=key42)
    assert again.status_code == 200 and again.json()["credited"] is False


async def test_top_up_credits_once_per_reference_and_projects_run_out(client, key42):
    first = await client.post("/api/v1/balance/top-ups", json={"amount_cents": 1000, "reference": "inv-77"},
                              headers=key42)
    again = await client.post("/api/v1/balance/top-ups", json={"amount_cents": 1000, "reference": "inv-77"},
                              headers=key42)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["balance_cents"] == first.json()["balance_cents"] == 51_000
    b = (await client.get("/api/v1/balance", headers=key42)).json()
    assert b == {"balance_cents": 51_000, "spent_last_hour_cents": 0, "runs_out_at": None}
    ids = await _twenty(client, key42)
    await asyncio.to_thread(_record_sent, await asyncio.to_thread(_claim_all, ids[:4]))
    b = (await client.get("/api/v1/balance", headers=key42)).json()
    assert b["spent_last_hour_cents"] == 20 and b["runs_out_at"] is not None
    hours = (datetime.fromisoformat(b["runs_out_at"]) - datetime.now(UTC)).total_seconds() / 3600
    assert abs(hours - (51_000 - 20) / 20) < 1
    bad = await client.post("/api/v1/balance/top-ups", json={"amount_cents": -5, "reference": "x"}, headers=key42)
    assert bad.status_code == 422
    assert_invariants()


async def test_recipient_api_validates_scopes_and_keeps_who_changed_what(client, key42, key7):
    rid = await new_recipient(client, key42, quiet_hours={"start": "22:00", "end": "07:00"}, daily_cap=3)
    got = (await client.get(f"/api/v1/recipients/{rid}", headers=key42)).json()
    assert got["quiet_start"] == "22:00" and got["daily_cap"] == 3
    for body, field in (({"timezone": "Mars/Olympus"}, "timezone"), ({"opted_out_channels": ["fax"]},
                                                                       "opted_out_channels")):
        r = await client.patch(f"/api/v1/recipients/{rid}", json=body, headers=key42)
        assert r.status_code == 422 and r.json()["field"] == field
    r = await client.post("/api/v1/recipients", json={"ref": "x-1", "display_name": "X", "timezone": "Nowhere/Land"},
                          headers=key42)
    assert r.status_code == 422 and r.json()["field"] == "timezone"
    assert (await client.get(f"/api/v1/recipients/{rid}", headers=key7)).status_code == 404
    assert (await client.patch(f"/api/v1/recipients/{rid}", json={"daily_cap": 1}, headers=key7)).status_code == 404
    r = await client.patch(f"/api/v1/recipients/{rid}", json={"opted_out_channels": ["sms"]}, headers=key42)
    assert r.status_code == 200 and r.json()["opted_out_channels"] == ["sms"]
    change = r.json()["changes"][0]
    assert (change["field"], change["new_value"], change["actor_ref"]) == ("opted_out_channels", "sms",
                                                                           "support:dana")


async def test_opt_out_set_through_the_api_suppresses_with_who_and_when(client, key42):
    rid = await new_recipient(client, key42)
    await client.patch(f"/api/v1/recipients/{rid}", json={"opted_out_channels": ["sms"]}, headers=key42)
    nid = (await client.post("/api/v1/notifications", json=send_body(rid), headers=key42)).json()["notification_id"]
    (r,) = await asyncio.to_thread(_claim_all, [nid])
    assert isinstance(r, plan.Suppressed) and r.reason == "opted_out"
    why = (await client.get(f"/api/v1/recipients/{rid}/messages", headers=key42)).json()
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert why["messages"][0]["answer"] == f"not sent: opted out of SMS on {today} by support:dana"
    assert why["heard_from_us_today"] is False and why["sent_this_week"] == 0 and why["reached_by"] == []


async def test_why_answers_quiet_hours_in_the_recipients_own_time(client, key42):
    now = datetime.now(UTC)
    kolkata = now.astimezone(ZoneInfo("Asia/Kolkata"))
    start = (kolkata - timedelta(hours=1)).strftime("%H:00")
    end = (kolkata + timedelta(hours=2)).strftime("%H:00")
    rid = await new_recipient(client, key42, timezone="Asia/Kolkata", quiet_hours={"start": start, "end": end})
    nid = (await client.post("/api/v1/notifications", json=send_body(rid), headers=key42)).json()["notification_id"]
    (r,) = await asyncio.to_thread(_claim_all, [nid])
    assert isinstance(r, plan.Deferred)
    why = (await client.get(f"/api/v1/recipients/{rid}/messages", headers=key42)).json()
    assert why["messages"][0]["answer"].startswith(f"waiting: quiet hours until {end} Asia/Kolkata (")
    assert why["messages"][0]["state"]["kind"] == "waiting_quiet_hours"


async def test_why_pages_a_recipients_messages_by_cursor(client, key42):
    """Invariant (paging on every list): `?limit=&cursor=` walks every message to the person once, newest first,
    `next_cursor` null on the last page; the old `before_id` name still pages the same way."""
    rid = await new_recipient(client, key42)
    made = [(await client.post("/api/v1/notifications", json=send_body(rid, period=f"2026-11-{10 + i}"),
                               headers=key42)).json()["notification_id"] for i in range(5)]
    seen: list[int] = []
    cursor = None
    while True:
        q = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"/api/v1/recipients/{rid}/messages", params=q, headers=key42)).json()
        seen += [m["id"] for m in page["messages"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(made, reverse=True)
    old = (await client.get(f"/api/v1/recipients/{rid}/messages", params={"limit": 2, "before_id": seen[1]},
                            headers=key42)).json()
    assert [m["id"] for m in old["messages"]] == seen[2:4]


async def test_a_scheduled_nudge_is_counted_apart_never_as_overdue(client, key42):
    lead = (await client.post("/api/v1/leads", json={"recipient_ref": "cust-003"}, headers=key42)).json()["lead_id"]
    r = await client.post(f"/api/v1/leads/{lead}/events", json={"event": "initiated"}, headers=key42)
    assert r.json()["outcome"] == "scheduled"
    normal = next(s for s in delivery_views.lane_stats(42) if s["lane"] == "normal")
    assert normal["depth"] == 0 and normal["oldest_owed_seconds"] == 0.0
    assert normal["scheduled"] == 1 and normal["next_due"] is not None


async def test_a_repeated_lifecycle_event_gets_the_same_answer_not_a_500(client, key42):
    lead = (await client.post("/api/v1/leads", json={"recipient_ref": "cust-003", "advisor_ref": "advisor-anna"},
                              headers=key42)).json()["lead_id"]
    first = await client.post(f"/api/v1/leads/{lead}/events", json={"event": "loan_sanctioned"}, headers=key42)
    again = await client.post(f"/api/v1/leads/{lead}/events", json={"event": "loan_sanctioned"}, headers=key42)
    assert first.status_code == again.status_code == 200
    same = {k: v for k, v in first.json().items() if k != "event_id"}  # no event_id given: two distinct events
    assert same == {k: v for k, v in again.json().items() if k != "event_id"}
    assert one("SELECT count(*) FROM notifications WHERE template = 'loan_sanctioned'") == 2


async def test_intent_whose_messages_are_suppressed_at_send_time_is_final(client, key42):
    lead = (await client.post("/api/v1/leads", json={"recipient_ref": "nobody-known"}, headers=key42)).json()
    r = await client.post(f"/api/v1/leads/{lead['lead_id']}/events", json={"event": "offer_submitted"},
                          headers=key42)
    (nid,) = r.json()["notification_ids"]
    (res,) = await asyncio.to_thread(_claim_all, [nid])
    assert isinstance(res, plan.Suppressed) and res.reason == "no_contact_point"
    assert one("SELECT status || ' / ' || final_reason FROM lead_notification_intents WHERE id = :i",
               i=r.json()["intent_id"]) == "suppressed / suppressed: no contact point"
    assert_invariants()


async def test_supersession_never_relabels_a_message_a_worker_holds(client, key42):
    lead = (await client.post("/api/v1/leads", json={"recipient_ref": "cust-003"}, headers=key42)).json()["lead_id"]
    first = (await client.post(f"/api/v1/leads/{lead}/events", json={"event": "initiated"}, headers=key42)).json()
    (nid,) = first["notification_ids"]
    with get_engine().begin() as c:  # a worker holds it: due now and leased
        c.execute(sa.text("UPDATE notifications SET next_attempt_at = now(), "
                          "leased_until = now() + interval '30 seconds' WHERE id = :i"), {"i": nid})
    await client.post(f"/api/v1/leads/{lead}/events", json={"event": "credit_check_done"}, headers=key42)
    assert one("SELECT status FROM notifications WHERE id = :i", i=nid) == "QUEUED", \
        "the worker records what happened to it; the supersession must not pretend it was not sent"

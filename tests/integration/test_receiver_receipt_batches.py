"""The mock provider's receipt batches (receiver/providers.py, the adversarial review of "Receipts in batches"):
receipts ready within the window go as one signed post, against an app stand-in that answers as the app may.

Found: a batch the app refused as too large (413: its body limit counts bytes, the batcher counted receipts — long
idempotency keys, or non-ASCII ones JSON escapes six bytes a character, fill 64 KB well before 100 receipts) was
retried whole twenty times, refused each time, and then every receipt in it was dropped.

Invariants protected: every receipt of a message the provider still holds reaches the app exactly once accepted —
through a 500 then a 200 (the same batch again), through a 413 (split until the halves fit); a receipt of a message
the provider no longer holds (the mock was reset while it waited) is never posted; a receipt's sender is told when
its post is done, whatever became of it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from receiver import providers
from receiver.settings import get_settings


@pytest.fixture
def mock(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The provider with no receipt delay and no fault switches, holding the messages in `state["held"]`, posting
    to an app stand-in that answers `state["answer"](body)` and records each post and its answer."""
    state: dict[str, Any] = {"posts": [], "held": None, "answer": lambda body: 200}

    async def still_held(refs: list[str]) -> set[str]:
        return set(refs) if state["held"] is None else set(refs) & state["held"]

    async def no_faults() -> None:
        return None

    monkeypatch.setattr(providers, "_still_held", still_held)
    monkeypatch.setattr(providers.faults, "current", no_faults)
    monkeypatch.setenv("RECEIVER_RECEIPT_DELAY", "0")
    get_settings.cache_clear()
    yield state
    get_settings.cache_clear()


def run(state: dict[str, Any], receipts: list[tuple[str, str]]) -> list[tuple[int, list[str]]]:
    """Each (reference, idempotency key) a receipt sent at once; the posts the app got: (answer, receipt ids)."""

    def app(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        code = state["answer"](request.content)
        state["posts"].append((code, [r["receipt_id"] for r in body.get("receipts", [body])]))
        return httpx.Response(code)

    async def main() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(app))
        providers_client = providers._receipt_client
        providers._receipt_client = lambda: client  # type: ignore[assignment]
        try:
            await asyncio.wait_for(asyncio.gather(*(providers.send_receipt("sms", ref, "delivered", key)
                                                    for ref, key in receipts)), 5)
        finally:
            providers._receipt_client = providers_client  # type: ignore[assignment]
            await client.aclose()

    asyncio.run(main())
    return list(state["posts"])


def accepted(posts: list[tuple[int, list[str]]]) -> list[str]:
    return sorted(rid for code, ids in posts if code < 300 for rid in ids)


def test_a_batch_the_app_finds_too_large_is_split_until_it_fits_and_every_receipt_arrives_once(mock):
    mock["answer"] = lambda body: 413 if len(body) > 700 else 200
    receipts = [(f"sms-{i:02d}", "t42:sms:" + "é" * 40 + f":{i}") for i in range(8)]  # ~300 bytes a receipt
    posts = run(mock, receipts)
    assert accepted(posts) == sorted(f"rcpt-sms-{i:02d}" for i in range(8)), posts
    assert all(len(ids) == 1 or code == 413 for code, ids in posts[1:]) and len(posts) < 20, posts


def test_a_batch_answered_500_then_200_arrives_once(mock):
    answers = iter([500, 200])
    mock["answer"] = lambda body: next(answers, 200)
    posts = run(mock, [(f"sms-{i}", f"k{i}") for i in range(3)])
    assert [code for code, _ in posts] == [500, 200] and posts[0][1] == posts[1][1], posts
    assert accepted(posts) == [f"rcpt-sms-{i}" for i in range(3)]


def test_a_receipt_of_a_message_forgotten_while_it_waited_is_never_posted(mock):
    mock["held"] = {"sms-kept"}  # the mock was reset: only the message sent since is held
    posts = run(mock, [("sms-kept", "k1"), ("sms-forgotten", "k2")])
    assert posts == [(200, ["rcpt-sms-kept"])], posts


def test_a_receipt_that_breaks_a_silence_is_posted_at_once_and_a_stream_still_goes_in_batches(mock, monkeypatch):
    """A quiet provider's lone receipt does not wait the batching window for company that never comes (with the
    window set far longer than the test's deadline, it is posted all the same); a receipt taken within the window
    of the last one is part of a stream and waits the window, so the one after it shares its post."""
    monkeypatch.setattr(providers, "RECEIPT_BATCH_WINDOW_S", 0.5)
    posts: list[list[str]] = []

    def app(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        posts.append([r["receipt_id"] for r in body.get("receipts", [body])])
        return httpx.Response(200)

    async def main() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(app))
        providers_client = providers._receipt_client
        providers._receipt_client = lambda: client  # type: ignore[assignment]
        try:
            loop = asyncio.get_running_loop()
            monkeypatch.setattr(providers, "RECEIPT_BATCH_WINDOW_S", 30.0)
            await asyncio.wait_for(providers.send_receipt("sms", "sms-alone", "delivered", "k0"), 5)
            monkeypatch.setattr(providers, "RECEIPT_BATCH_WINDOW_S", 0.5)
            queue = providers._batchers[(loop, "sms")]
            puts: list[Any] = []
            put = queue.put_nowait
            queue.put_nowait = lambda item: (puts.append(item), put(item))[1]  # type: ignore[method-assign]
            second = loop.create_task(providers.send_receipt("sms", "sms-next", "delivered", "k1"))
            deadline = loop.time() + 5
            while not (puts and queue.empty()) and loop.time() < deadline:  # put, then taken by the collector
                await asyncio.sleep(0)
            third = providers.send_receipt("sms", "sms-last", "delivered", "k2")
            await asyncio.wait_for(asyncio.gather(second, third), 5)
        finally:
            providers._receipt_client = providers_client  # type: ignore[assignment]
            await client.aclose()

    asyncio.run(main())
    assert posts == [["rcpt-sms-alone"], ["rcpt-sms-next", "rcpt-sms-last"]], posts

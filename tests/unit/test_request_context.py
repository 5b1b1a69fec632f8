"""guard.RequestContext with a page error served as a file (the ASGI pathsend extension, used by granian for
Reflex's static 404 page).

Invariant: an error response whose body is a pathsend still starts before its file is sent (it was held for a body
that never came: every missing /favicon.ico was an "ASGI flow error: Response not started" 500).
"""

from __future__ import annotations

import asyncio
from typing import Any

from dashboard.api.guard import RequestContext


def test_a_held_error_start_goes_out_before_its_pathsend() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.pathsend", "path": "/tmp/404.html"})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "GET", "path": "/favicon.ico", "headers": [], "query_string": b""}
    asyncio.run(RequestContext(app)(scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.pathsend"]
    assert sent[0]["status"] == 404 and (b"x-request-id" in dict(sent[0]["headers"]))
    assert b"content-security-policy" in dict(sent[0]["headers"]), "our security headers go out with the file too"

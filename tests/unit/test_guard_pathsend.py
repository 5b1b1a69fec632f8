"""The request-context layer (pure ASGI, no server): an error page sent as a file by path (the dashboard's styled 404,
served with `http.response.pathsend`) reaches the browser with its status and our headers. The layer holds an error's
start to rewrite its body; a file has no body message, and holding it forever broke every unknown address."""

import asyncio
from typing import Any

from dashboard.api.guard import RequestContext


def test_an_error_page_sent_by_path_is_delivered_with_its_start_and_our_headers():
    async def static_404(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.pathsend", "path": "/srv/404.html"})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "GET", "path": "/no-such-page", "headers": []}
    asyncio.run(RequestContext(static_404)(scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.pathsend"]
    assert sent[0]["status"] == 404 and sent[1]["path"] == "/srv/404.html"
    names = {k for k, _ in sent[0]["headers"]}
    assert b"x-request-id" in names and b"content-security-policy" in names, "our headers on the file too"

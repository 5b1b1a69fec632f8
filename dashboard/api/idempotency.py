"""The `Idempotency-Key` layer: every POST that needs an API key (every creating or changing POST) takes one.

Innermost of the ASGI layers (after the key gate, the body limit and the hostile-input guard, so their refusals are
never stored): same key and request → the first answer again (`Idempotent-Replayed: true`); same key, other
request → 422 `idempotency_key_reused`; first request still running → 409 `idempotency_key_in_use`. Stored per
tenant in PostgreSQL (domain/access/idempotency.py). Kept: every answer the route gave, except a refusal of the
request's shape (`invalid_request`, `malformed_json`: nothing ran), a 429 and a 5xx — those free the key again.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dashboard.api.guard import ASGI, Receive, Send, send_json
from dashboard.limits import read_body, replaying
from domain.access import idempotency as idem

_NOT_KEPT = {"invalid_request", "malformed_json"}

PARAMETER: dict[str, Any] = {
    "name": idem.HEADER, "in": "header", "required": False,
    "description": "Any unique string (a UUID): the same key with the same request replays the first answer for "
                   "24 h; with another request it is refused (422 idempotency_key_reused).",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": idem.KEY_PATTERN},
}


def publish(doc: dict[str, Any]) -> None:
    """Every POST that needs a key documents the header."""
    for ops in doc.get("paths", {}).values():
        op = ops.get("post")
        if op is not None and op.get("security"):
            op.setdefault("parameters", []).append(PARAMETER)


def _kept(status: int, body: bytes) -> bool:
    if status >= 500 or status == 429:
        return False
    if status in (400, 422):
        try:
            parsed = json.loads(body)
        except ValueError:
            return True
        return not (isinstance(parsed, dict) and parsed.get("error") in _NOT_KEPT)
    return True


class Idempotency:
    def __init__(self, app: ASGI) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        principal = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        raw = dict(scope.get("headers") or []).get(idem.HEADER.lower().encode())
        if principal is None or scope.get("method") != "POST" or raw is None:
            await self.app(scope, receive, send)
            return
        key = raw.decode("latin-1")
        if not idem.valid_key(key):
            await send_json(send, 422, {
                "error": "invalid_request", "field": idem.HEADER,
                "detail": f"{idem.HEADER} must be 1 to 255 printable ASCII characters without spaces",
                "details": [{"loc": ["header", idem.HEADER], "msg": "invalid idempotency key"}]})
            return
        body = await read_body(receive)
        if body is None:
            return
        tenant, path = int(principal.tenant_id), str(scope.get("path", ""))
        digest = idem.request_digest("POST", path, scope.get("query_string", b"").decode("latin-1"), body)
        outcome = await asyncio.to_thread(idem.claim, tenant, key, digest, "POST", path)
        if isinstance(outcome, idem.Replay):
            raw_headers = [(b"content-type", outcome.content_type.encode()),
                           (b"content-length", str(len(outcome.body)).encode()), (b"idempotent-replayed", b"true")]
            await send({"type": "http.response.start", "status": outcome.status, "headers": raw_headers})
            await send({"type": "http.response.body", "body": outcome.body})
            return
        if isinstance(outcome, idem.Reused):
            await send_json(send, 422, {"error": "idempotency_key_reused", "detail": (
                f"this {idem.HEADER} was first used for another request; send a new key for a new request")})
            return
        if isinstance(outcome, idem.InFlight):
            await send_json(send, 409, {"error": "idempotency_key_in_use", "detail": (
                f"the first request with this {idem.HEADER} has not answered yet; retry shortly")},
                headers={"Retry-After": "1"})
            return
        await self._run(scope, replaying(body, receive), send, tenant, key, digest)

    async def _run(self, scope: dict[str, Any], receive: Receive, send: Send, tenant: int, key: str,
                   digest: str) -> None:
        status, ctype, held = 500, "application/json", []

        async def capture(message: dict[str, Any]) -> None:
            # Held until the answer is stored: a client that retries the moment it has an answer gets it replayed.
            nonlocal status, ctype
            if message["type"] == "http.response.start":
                status = int(message["status"])
                ctype = next((v.decode("latin-1") for k, v in message.get("headers", [])
                              if k.lower() == b"content-type"), ctype)
            held.append(message)

        try:
            await self.app(scope, receive, capture)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(idem.release, tenant, key, digest))
            raise
        body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")
        if _kept(status, body):
            await asyncio.to_thread(idem.finish, tenant, key, digest, status, ctype, body)
        else:
            await asyncio.to_thread(idem.release, tenant, key, digest)
        for message in held:
            await send(message)

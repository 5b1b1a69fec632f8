"""The ASGI layers every request crosses before any route runs (outermost first, see `app.build_api`):

1. `RequestContext` — a request id for every request (`X-Request-Id`, and `request_id` in every JSON error body),
   the security headers on every response (API and dashboard pages alike: the Reflex app is mounted inside the API
   app, so its pages cross this layer too; JSON answers also `Cache-Control: no-store`), and a JSON 500 with the
   request id instead of a plain-text traceback.
2. `ApiKeyGate` — the API key of a route that needs one is checked from the headers alone, before the body is read
   or parsed; unknown keys are throttled per client address (`client_of`: the peer, or behind a trusted proxy the
   address it forwarded).
3. `BodyLimit` (dashboard/limits.py) — 413 above `OUTBOX_MAX_BODY_BYTES`.
4. `HostileInput` — a JSON body or query string holding a NUL, a lone surrogate or a non-finite number is refused
   (422 naming the field) before any route sees it: PostgreSQL cannot store the first two and JSON has no third, so
   they would otherwise surface as a 500 deep in a transaction. One place covers every write endpoint, present and
   future.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl

from fastapi.routing import APIRoute
from starlette.routing import Match

from dashboard.api.errors import ERROR_CODES, ApiError
from dashboard.api.metrics import observe_request
from dashboard.limits import read_body, replaying
from domain import logs
from domain.access import peers
from domain.settings import get_settings

log = logging.getLogger("outbox.api")

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
ASGI = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

REQUEST_ID_HEADER = "X-Request-Id"
_INCOMING_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")  # a proxy's id is kept only if it is plainly harmless
# JSON answers never load anything or render in a frame; pages (Reflex, the API docs) need their own scripts and
# websocket, so they get only the framing rule.
API_CSP = "default-src 'none'; frame-ancestors 'none'"
PAGE_CSP = "frame-ancestors 'none'"
COMMON_HEADERS = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                  (b"x-frame-options", b"DENY"))
API_CACHE = (b"cache-control", b"no-store")


def is_api_path(path: str) -> bool:
    """JSON endpoints: the API, health and metrics (the docs page is HTML)."""
    return (path.startswith("/api/") and not path.startswith("/api/docs")) or path in ("/healthz", "/metrics")


def client_of(scope: Mapping[str, Any]) -> str:
    """The client address a request is counted under: the connection's peer, or, when that peer is one of
    `OUTBOX_TRUSTED_PROXIES`, the right-most forwarded address that is not (domain/access/peers.py)."""
    peer = str((scope.get("client") or ("unknown", 0))[0])
    forwarded = peers.forwarded_for(v.decode("latin-1") for k, v in scope.get("headers") or []
                                    if k.lower() == b"x-forwarded-for")
    return peers.client_address(peer, forwarded, get_settings().trusted_networks)


def request_id(scope: dict[str, Any]) -> str:
    return str(scope.get("state", {}).get("request_id", ""))


async def send_json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    out += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": raw})


class RequestContext:
    """Layer 1 (see the module's docstring): a request id, the security headers, a JSON 500 for what escapes."""

    def __init__(self, app: ASGI) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = incoming if _INCOMING_ID.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        answer = _Answer(send, rid, is_api_path(scope.get("path", "")))
        t0 = time.perf_counter()
        try:
            with logs.bind(request_id=rid):
                await self.app(scope, receive, answer.send)
                if answer.api:
                    self._done(scope, answer.status, time.perf_counter() - t0)
        except Exception:
            log.exception("unhandled error, request %s %s %s", rid, scope.get("method"), scope.get("path"))
            await answer.internal_error()

    @staticmethod
    def _done(scope: dict[str, Any], status: int, seconds: float) -> None:
        """One line per API request (never its query string: a search term may be a phone number) and its
        latency in the route's histogram."""
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        observe_request(str(scope.get("method")), route, status, seconds)
        principal = scope.get("state", {}).get("principal")
        log.info("request", extra={"method": scope.get("method"), "route": route, "path": scope.get("path"),
                                   "tenant": getattr(principal, "tenant_id", None),
                                   "status": status, "duration_ms": round(seconds * 1000, 1)})


class _Answer:
    """One request's way out, in `RequestContext`: our headers on its start, and an error's start held until its
    body is complete, so that the body can carry the request id."""

    def __init__(self, send: Send, rid: str, api: bool) -> None:
        self._send, self.rid, self.api = send, rid, api
        self.headers = [*COMMON_HEADERS, (b"content-security-policy", (API_CSP if api else PAGE_CSP).encode()),
                        (REQUEST_ID_HEADER.lower().encode(), rid.encode())]
        if api:
            self.headers.append(API_CACHE)  # a tenant's rows never sit in a shared or a browser cache
        self.status = 500  # what the app answered (for the request's log line)
        self.started = False  # a start went out: too late for a JSON 500
        self._held: dict[str, Any] | None = None  # an error's start message, held until its body is known
        self._chunks: list[bytes] = []

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await self._start(message)
        elif kind == "http.response.pathsend" and self._held is not None:
            # A page's error served as a file (Reflex's 404.html through the pathsend extension): no body to
            # rewrite, so the held start goes out as it is, before the file.
            start, self._held, self.started = self._held, None, True
            await self._send(start)
            await self._send(message)
        elif kind == "http.response.body" and self._held is not None:
            await self._error_body(message)
        else:
            await self._send(message)

    async def _start(self, message: dict[str, Any]) -> None:
        self.status = int(message["status"])
        ours = {k for k, _ in self.headers}
        headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in ours]
        message = {**message, "headers": headers + self.headers}
        if self.status >= 400:
            self._held = message  # every error body gets the request id: rewrite it once it is complete
            return
        self.started = True
        await self._send(message)

    async def _error_body(self, message: dict[str, Any]) -> None:
        assert self._held is not None
        self._chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        start, raw = self._held, b"".join(self._chunks)
        self._held = None
        body = _with_request_id(start, raw, self.rid, self.api)
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        if body is not None and self.api:
            headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]
            headers.append((b"content-type", b"application/json"))
        final = body if body is not None else raw
        self.started = True
        await self._send({**start, "headers": [*headers, (b"content-length", str(len(final)).encode())]})
        await self._send({"type": "http.response.body", "body": final})

    async def internal_error(self) -> None:
        """Something escaped the app: a JSON 500 with the request id, unless the answer is under way (then the
        server closes the connection)."""
        if self.started:
            return
        await self._send({"type": "http.response.start", "status": 500, "headers": [
            *self.headers, (b"content-type", b"application/json")]})
        await self._send({"type": "http.response.body", "body": json.dumps(
            {"error": "internal_error", "detail": "something went wrong on our side; quote the request id",
             "request_id": self.rid}).encode()})


def _with_request_id(start: dict[str, Any], body: bytes, rid: str, api: bool) -> bytes | None:
    """The error body with `request_id` added; a non-JSON error of a JSON endpoint becomes JSON. None: unchanged
    (a page's own error)."""
    ctype = next((v for k, v in start["headers"] if k.lower() == b"content-type"), b"").decode("latin-1")
    if "json" in ctype:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            parsed.setdefault("request_id", rid)
            return json.dumps(parsed).encode()
    if not api:
        return None
    status = int(start["status"])
    return json.dumps({"error": ERROR_CODES.get(status, "http_error"), "request_id": rid}).encode()


class ApiKeyGate:
    """Authenticates, from the headers alone, every request whose route depends on the API-key principal, and
    leaves the principal in `scope["state"]` for the route. A route without that dependency (health, metrics,
    signed receipts, the JSON 404) passes untouched."""

    def __init__(self, app: ASGI, routes: list[Any], needs_key: Callable[[APIRoute], bool],
                 authenticate: Callable[[str | None, str], Awaitable[Any]]) -> None:
        self.app, self.routes, self.needs_key, self.authenticate = app, routes, needs_key, authenticate

    def _route_needs_key(self, scope: dict[str, Any]) -> bool:
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return isinstance(route, APIRoute) and self.needs_key(route)
        return False

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._route_needs_key(scope):
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization")
        try:
            principal = await self.authenticate(header.decode("latin-1") if header is not None else None,
                                                client_of(scope))
        except ApiError as exc:
            await send_json(send, exc.status, exc.body, exc.headers)
            return
        scope.setdefault("state", {})["principal"] = principal
        with logs.bind(tenant=getattr(principal, "tenant_id", None)):
            await self.app(scope, receive, send)


# --- hostile input -------------------------------------------------------------------------------------------

def unsafe_text(value: str) -> str | None:
    """Why PostgreSQL could not keep this string, or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    if any("\ud800" <= ch <= "\udfff" for ch in value):
        return "contains a lone surrogate (\\ud800-\\udfff): not valid Unicode text"
    return None


def hostile(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(field path, why) for every string, object key or number in a JSON value that cannot be stored."""
    if isinstance(value, str):
        why = unsafe_text(value)
        if why:
            yield path, why
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield path, "is not a finite number"
    elif isinstance(value, dict):
        for k, v in value.items():
            why = unsafe_text(k)
            if why:
                yield path or "body", f"has a key that {why}"
                continue
            yield from hostile(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from hostile(v, f"{path}[{i}]")


class HostileInput:
    def __init__(self, app: ASGI) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_api_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        for name, value in parse_qsl(query, keep_blank_values=True):
            for field, why in hostile(value, name):
                await self._refuse(send, "query", field, why)
                return
        headers = dict(scope.get("headers") or [])
        if b"json" not in headers.get(b"content-type", b"").lower():
            await self.app(scope, receive, send)
            return
        raw = await read_body(receive)
        if raw is None:
            return
        try:
            parsed = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):
            parsed = None  # malformed JSON: the route answers 400 malformed_json as before
        for field, why in hostile(parsed, ""):
            await self._refuse(send, "body", field or "body", why)
            return
        await self.app(scope, replaying(raw, receive), send)

    @staticmethod
    async def _refuse(send: Send, where: str, field: str, why: str) -> None:
        await send_json(send, 422, {"error": "invalid_request", "field": field,
                                    "detail": f"{field} {why}; nothing was changed",
                                    "details": [{"loc": [where, field], "msg": why}]})

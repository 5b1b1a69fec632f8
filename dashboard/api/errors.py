"""Every error the API answers, as JSON `{"error": code, ...}`: the codes, `ApiError`, and their handlers, registered
in one place. A leaf: it imports nothing of the dashboard's (`guard` imports it). `guard.RequestContext` adds the
request id to each of them (and turns anything that escapes into a JSON 500)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

# What each door answers a 401 with in WWW-Authenticate: the scheme it takes (RFC 9110 11.6.1: every 401 carries
# one; RFC 6750 3: a bearer token that was sent and refused adds error="invalid_token"). A browser prompts for
# credentials only for Basic and Digest: none of these.
API_KEY = 'Bearer realm="outbox-api"'
API_KEY_REFUSED = f'{API_KEY}, error="invalid_token"'
METRICS_TOKEN = 'Bearer realm="outbox-metrics"'
METRICS_TOKEN_REFUSED = f'{METRICS_TOKEN}, error="invalid_token"'
RECEIPT_SIGNATURE = 'Standard-Webhooks realm="outbox-receipts"'  # webhook-id, -timestamp and -signature headers
LOGIN_TICKET = 'Login-Ticket realm="outbox-dashboard"'  # the dashboard's one-time ticket for its session cookie
CHALLENGE_HEADER = "WWW-Authenticate"
# The code of an error answered by status alone (a framework's 404 or 405, a plain-text error of a JSON endpoint).
ERROR_CODES = {400: "malformed_json", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "payload_too_large", 422: "invalid_request",
               429: "rate_limited", 500: "internal_error", 503: "unavailable"}


class ApiError(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None, **extra: Any) -> None:
        if status == 401 and CHALLENGE_HEADER not in (headers or {}):
            raise TypeError("a 401 names the scheme it takes: build it with errors.unauthorized()")
        self.status, self.body, self.headers = status, {"error": error, **extra}, headers


def unauthorized(challenge: str, error: str = "unauthorized", **extra: Any) -> ApiError:
    """The one way a 401 is built: the body every error has, and the challenge (one of the constants above)."""
    return ApiError(401, error, headers={CHALLENGE_HEADER: challenge}, **extra)


class ErrorOut(BaseModel):
    """The shape of every error answer (some carry more, e.g. `current_revision`, `steps`, `max_bytes`)."""

    model_config = ConfigDict(extra="allow")
    error: str = Field(description="a stable code: not_found, invalid_request, malformed_json, unauthorized, …")
    request_id: str = Field(description="quote it to support; also the X-Request-Id header")
    field: str | None = Field(default=None, description="invalid_request: the field at fault (dotted path)")
    detail: Any = None


_DESCRIPTIONS = {400: "malformed JSON", 401: "no, unknown or revoked API key", 404: "missing, or another tenant's",
                 409: "conflict (stale revision, duplicate reference)", 413: "body over OUTBOX_MAX_BODY_BYTES",
                 422: "invalid request (names the field) or refused by a rule",
                 429: "rate limited (Retry-After)", 500: "our fault (quote the request id)"}
COMMON_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text} for code, text in _DESCRIPTIONS.items()}
COMMON_RESPONSES[401]["headers"] = {CHALLENGE_HEADER: {
    "required": True, "schema": {"type": "string"},
    "description": f"the scheme to authenticate with, e.g. `{API_KEY}`"}}


def _field(loc: list[Any]) -> str:
    parts = [str(p) for p in loc[1:]] if loc and loc[0] in ("body", "query", "path", "header") else list(map(str, loc))
    return ".".join(parts) or (str(loc[0]) if loc else "body")


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
    malformed = any(e.get("type") == "json_invalid" for e in exc.errors())
    if malformed:
        return JSONResponse({"error": "malformed_json", "details": errors}, status_code=400)
    field = _field(errors[0]["loc"]) if errors else "body"
    return JSONResponse({"error": "invalid_request", "field": field,
                         "detail": f"{field}: {errors[0]['msg']}" if errors else "invalid request",
                         "details": errors}, status_code=422)


async def http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    # keep the exception's headers: a 405 must say which methods are allowed (`Allow`)
    return JSONResponse({"error": ERROR_CODES.get(exc.status_code, "http_error"), "detail": exc.detail},
                        status_code=exc.status_code, headers=exc.headers)


def install(api: FastAPI) -> None:
    api.add_exception_handler(ApiError, _api_error)
    api.add_exception_handler(RequestValidationError, _invalid)
    api.add_exception_handler(StarletteHTTPException, http_error)

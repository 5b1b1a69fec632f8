"""Every error the API answers, as JSON `{"error": code, ...}`, registered in one place. `guard.RequestContext`
adds the request id to each of them (and turns anything that escapes into a JSON 500)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from dashboard.api.guard import ERROR_CODES


class ApiError(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None, **extra: Any) -> None:
        self.status, self.body, self.headers = status, {"error": error, **extra}, headers


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

"""Every error the API answers, as JSON `{"error": code, ...}`, registered in one place."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class ApiError(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None, **extra: Any) -> None:
        self.status, self.body, self.headers = status, {"error": error, **extra}, headers


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]
    malformed = any(e.get("type") == "json_invalid" for e in exc.errors())
    return JSONResponse({"error": "malformed_json" if malformed else "invalid_request", "details": errors},
                        status_code=400 if malformed else 422)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"error": "not_found" if exc.status_code == 404 else "http_error", "detail": exc.detail},
                        status_code=exc.status_code)


def install(api: FastAPI) -> None:
    api.add_exception_handler(ApiError, _api_error)
    api.add_exception_handler(RequestValidationError, _invalid)
    api.add_exception_handler(StarletteHTTPException, _http)

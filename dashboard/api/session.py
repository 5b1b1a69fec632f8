"""The dashboard's cookie session over HTTP: the only place the session cookie is set or cleared (a websocket
message cannot set an HttpOnly cookie). Not part of the public API (no key, not in the OpenAPI document)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from dashboard.api.errors import LOGIN_TICKET, unauthorized
from domain.access import sessions
from domain.settings import get_settings

router = APIRouter(prefix="/api/session", include_in_schema=False)


class TicketIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: str = Field(min_length=1, max_length=100)


def _cookie(response: JSONResponse, token: str, max_age: int) -> None:
    response.set_cookie(sessions.COOKIE, token, max_age=max_age, path="/", httponly=True, samesite="strict",
                        secure=get_settings().env == "production")


@router.post("")
async def start(body: TicketIn, request: Request) -> JSONResponse:
    """A login ticket spent for the session cookie; the browser's previous session (if any) ends (rotation)."""
    previous = request.cookies.get(sessions.COOKIE, "")
    token = await asyncio.to_thread(sessions.exchange_ticket, body.ticket, previous)
    if token is None:
        raise unauthorized(LOGIN_TICKET, detail="unknown, used or expired login ticket")
    response = JSONResponse({"session": "started"})
    _cookie(response, token, int(sessions.SESSION_TTL.total_seconds()))
    return response


@router.post("/end")
async def end(request: Request) -> JSONResponse:
    """Logout: the session ends for every tab of this browser, and the cookie is cleared."""
    token = request.cookies.get(sessions.COOKIE, "")
    if token:
        await asyncio.to_thread(sessions.end_session, sessions.token_hash(token))
    response = JSONResponse({"session": "ended"})
    _cookie(response, "", 0)
    return response

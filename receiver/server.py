"""uvicorn's HTTP protocols with TCP_NODELAY on every connection.

With `--workers N` uvicorn binds the listening socket itself as `socket.socket(family)` (proto 0), and asyncio sets
TCP_NODELAY only on sockets whose proto is IPPROTO_TCP — so every answer on a kept-alive connection (headers and
body written apart) waited for the client's delayed ACK: 55 ms per request instead of 7 (measured here, sequential
signed webhook POSTs, 2 processes vs 1). One process (`--workers 1`) binds through asyncio and never had it.

`serve` runs httptools' parser on uvloop (`NoDelayHttpToolsProtocol`): h11's pure-Python parsing was the largest
share of the receiver's CPU per POST. The h11 protocol stays for a machine without httptools.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        _nodelay(transport)
        super().connection_made(transport, *args, **kwargs)


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools not installed
    HAVE_HTTPTOOLS = False
else:
    HAVE_HTTPTOOLS = True

    class NoDelayHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
            _nodelay(transport)
            super().connection_made(transport, *args, **kwargs)


def uvicorn_options() -> dict[str, Any]:
    """The protocol and loop `serve` runs: httptools on uvloop when both are installed, else h11 on asyncio."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        loop = "asyncio"
    else:
        loop = "uvloop"
    http = "receiver.server:NoDelayHttpToolsProtocol" if HAVE_HTTPTOOLS else "receiver.server:NoDelayH11Protocol"
    return {"http": http, "loop": loop}

"""uvicorn's HTTP protocol with TCP_NODELAY on every connection.

With `--workers N` uvicorn binds the listening socket itself as `socket.socket(family)` (proto 0), and asyncio sets
TCP_NODELAY only on sockets whose proto is IPPROTO_TCP — so every answer on a kept-alive connection (headers and
body written apart) waited for the client's delayed ACK: 55 ms per request instead of 7 (measured here, sequential
signed webhook POSTs, 2 processes vs 1). One process (`--workers 1`) binds through asyncio and never had it.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport, *args, **kwargs)

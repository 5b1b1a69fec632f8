"""Who is on the other end of a request, for everything counted per client address (the login throttle, the API's
unknown-key gate): the peer of the connection, or — only when that peer is a proxy we trust
(`OUTBOX_TRUSTED_PROXIES`) — the right-most address of `X-Forwarded-For` that is not one of our proxies.

Never the left-most: every proxy *appends* the address it saw, so the left of the header is whatever the caller
wrote (`X-Forwarded-For: 1.2.3.4` buys a fresh throttle bucket per request); only the entries our own proxies added,
read from the right, are facts. Nobody trusted (the default) means the header is ignored altogether: fail closed.
Pure: no settings read here, the callers hand the networks in.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.cache
def parse_networks(text: str) -> tuple[Network, ...]:
    """`OUTBOX_TRUSTED_PROXIES`: addresses or CIDRs separated by commas or spaces. ValueError names a bad entry."""
    out: list[Network] = []
    for part in text.replace(",", " ").split():
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"{part!r} is not an IP address or CIDR network (e.g. 10.0.0.0/8, 127.0.0.1)") from None
    return tuple(out)


def _address(text: str) -> Address | None:
    try:
        ip = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:10.0.0.1 from a dual-stack socket is 10.0.0.1
    return mapped if mapped is not None else ip


def _trusted(ip: Address, networks: tuple[Network, ...]) -> bool:
    return any(ip.version == n.version and ip in n for n in networks)


def forwarded_for(values: Iterable[str]) -> str:
    """Every `X-Forwarded-For` header of a request joined in order (a second header is a continuation)."""
    return ",".join(v for v in values if v)


def client_address(peer: str, forwarded: str | None, trusted: tuple[Network, ...]) -> str:
    """The client we count: walk `X-Forwarded-For` from the right while each hop is one of our proxies; the first
    address that is not is the client. An entry that is not an address stops the walk at the hop that passed it on;
    every hop trusted (a client on the proxy's own host) gives the left-most."""
    current = _address(peer)
    if current is None or not forwarded or not _trusted(current, trusted):
        return peer
    for hop in reversed(forwarded.split(",")):
        ip = _address(hop)
        if ip is None:
            break
        current = ip
        if not _trusted(ip, trusted):
            break
    return str(current)

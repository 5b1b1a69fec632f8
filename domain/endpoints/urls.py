"""Where a tenant's webhook may go: never to us or our neighbours (SSRF).

A URL is refused when its host is, or resolves to, a loopback, private, link-local, multicast, reserved or cloud
metadata address, or is a name that means one (`localhost`, `metadata.google.internal`). The check runs when an
endpoint is saved AND again after DNS on every send (`addresses_for_send`): a name that resolved to a public address
yesterday may point at 169.254.169.254 today (DNS rebinding) — the sender connects to the addresses just checked.
Development only: `host:port` pairs on an allowlist (the mock receiver) pass.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit, urlunsplit

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL: Final = 2048
BLOCKED_NAMES: Final = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "metadata",
                                  "metadata.google.internal", "instance-data", "instance-data.ec2.internal"})
# Cloud metadata services (AWS/GCP/Azure/OpenStack, AWS IPv6, Alibaba): refused even where "public".
METADATA: Final = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"))
Resolver = Callable[[str, int], Iterable[str]]


@dataclass(frozen=True)
class Refused:
    reason: str


@dataclass(frozen=True)
class Allowed:
    host: str
    port: int
    addresses: tuple[str, ...]  # empty for an allowlisted development target


def address_refusal(ip: IP) -> str | None:
    """Pure: why a webhook must not be sent to this address, or None."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    elif isinstance(ip, ipaddress.IPv6Address) and ip.sixtofour is not None:
        ip = ip.sixtofour  # 6to4 (2002::/16) delivers to the IPv4 address it carries: judge that one
    if ip in METADATA:
        return "a cloud metadata address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_private:
        return "a private address"
    if ip.is_multicast or ip.is_reserved or ip.is_unspecified or not ip.is_global:
        return "not a public address"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address, once each, in the system's order of preference (RFC 6724): the send connects to the first,
    so it must be one this host can reach (sorting the strings put IPv6 first on IPv4-only hosts)."""
    return list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))


def parse(url: str) -> tuple[str, int] | Refused:
    if len(url) > MAX_URL:
        return Refused(f"longer than {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return Refused("not a URL")
    if parts.scheme not in ("http", "https"):
        return Refused("must start with https:// (or http://)")
    if parts.username is not None or parts.password is not None:
        return Refused("must not carry credentials (user:password@)")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return Refused("has no host")
    return host, port or (443 if parts.scheme == "https" else 80)


def check(url: str, allowlist: frozenset[str] = frozenset(), resolve: Resolver = system_resolver) -> Allowed | Refused:
    """Every address the host resolves to must be public; one private answer refuses the whole name."""
    parsed = parse(url)
    if isinstance(parsed, Refused):
        return parsed
    host, port = parsed
    if f"{host}:{port}" in allowlist:
        return Allowed(host, port, ())
    if host in BLOCKED_NAMES or host.endswith(".localhost"):
        return Refused(f"{host} is a local name")
    try:
        literal: IP | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        why = address_refusal(literal)
        return Refused(f"{host} is {why}") if why else Allowed(host, port, (str(literal),))
    try:
        addresses = tuple(resolve(host, port))
    except (OSError, UnicodeError):
        return Refused(f"{host} does not resolve")
    if not addresses:
        return Refused(f"{host} does not resolve")
    for a in addresses:
        why = address_refusal(ipaddress.ip_address(a.split("%", 1)[0]))
        if why:
            return Refused(f"{host} resolves to {why}")
    return Allowed(host, port, addresses)


def addresses_for_send(url: str, allowlist: frozenset[str] = frozenset(),
                       resolve: Resolver = system_resolver) -> Allowed | Refused:
    """The same check after a fresh DNS lookup, at send time: the sender connects only to `addresses`."""
    return check(url, allowlist, resolve)


@dataclass(frozen=True)
class Pinned:
    """One request to the address just checked: `url` names the address, `host` is the Host header the name needs
    and `sni` the TLS server name (certificates are verified against the name, not the address)."""

    url: str
    host: str | None = None
    sni: str | None = None


def pinned(url: str, target: Allowed) -> Pinned:
    """Pure: the request that connects to `target.addresses[0]` (checked) instead of resolving the name again;
    an allowlisted development target (no addresses) is asked as it is."""
    if not target.addresses:
        return Pinned(url)
    parts = urlsplit(url)
    ip = target.addresses[0].split("%", 1)[0]
    literal = f"[{ip}]" if ":" in ip else ip
    return Pinned(urlunsplit((parts.scheme, f"{literal}:{target.port}", parts.path or "/", parts.query, "")),
                  host=parts.netloc, sni=target.host if parts.scheme == "https" else None)


def dev_allowlist() -> frozenset[str]:
    """Development only: the mock receiver's host:port and OUTBOX_ENDPOINT_ALLOWLIST; production: nothing."""
    from domain.settings import get_settings

    s = get_settings()
    if s.env != "development":
        return frozenset()
    parsed = parse(s.receiver_url)
    own = {f"{parsed[0]}:{parsed[1]}"} if not isinstance(parsed, Refused) else set()
    return frozenset(own | {a.strip().lower() for a in s.endpoint_allowlist.split(",") if a.strip()})

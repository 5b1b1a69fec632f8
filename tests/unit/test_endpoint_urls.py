"""The webhook URL guard (domain/endpoints/urls.py), with a fake resolver.

Invariants: no endpoint may point at a loopback, private, link-local, multicast, reserved or metadata address —
by literal, by IPv4-mapped IPv6, by a local name, or by a name that resolves to one (one bad answer refuses the
whole name, which is what catches DNS rebinding at send time); public addresses pass; only an exact `host:port` on
the development allowlist passes otherwise.
"""

from __future__ import annotations

import pytest

from domain.endpoints.urls import Allowed, Refused, addresses_for_send, check


def fake(answers: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise OSError("no such host")
        return answers[host]
    return resolve


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/hook", "http://127.1.2.3:8080/", "https://[::1]/", "http://10.0.0.5/", "http://172.16.3.4/",
    "http://192.168.1.10/", "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/",
    "http://100.100.100.200/", "http://[::ffff:127.0.0.1]/", "http://0.0.0.0/", "http://224.0.0.1/",
    "http://localhost:8090/", "http://api.localhost/", "http://metadata.google.internal/computeMetadata/v1/",
    "http://[fe80::1]/", "http://100.64.0.1/", "ftp://example.com/", "https://user:pw@example.com/",
    "http://rebinder.example/", "http://mixed.example/", "http://nowhere.example/",
])
def test_private_local_and_metadata_targets_are_refused(url: str) -> None:
    resolve = fake({"rebinder.example": ["169.254.169.254"], "mixed.example": ["93.184.216.34", "10.1.1.1"]})
    assert isinstance(check(url, resolve=resolve), Refused), url


def test_public_targets_pass_with_the_addresses_to_connect_to() -> None:
    resolve = fake({"hooks.example.com": ["93.184.216.34", "2606:2800:220:1::1"]})
    got = check("https://hooks.example.com/outbox", resolve=resolve)
    assert isinstance(got, Allowed) and got.port == 443 and "93.184.216.34" in got.addresses
    assert isinstance(check("http://93.184.216.34:8443/x", resolve=resolve), Allowed)


def test_a_name_that_turns_private_after_saving_is_refused_at_send_time() -> None:
    answers = {"shop.example": ["93.184.216.34"]}
    assert isinstance(check("https://shop.example/h", resolve=fake(answers)), Allowed)
    answers["shop.example"] = ["127.0.0.1"]  # DNS rebinding: the same name, now pointing at us
    assert isinstance(addresses_for_send("https://shop.example/h", resolve=fake(answers)), Refused)


def test_only_an_exact_host_port_on_the_allowlist_passes() -> None:
    allow = frozenset({"127.0.0.1:8090"})
    assert isinstance(check("http://127.0.0.1:8090/webhooks/orders", allow), Allowed)
    assert isinstance(check("http://127.0.0.1:8091/webhooks/orders", allow), Refused)
    assert isinstance(check("http://127.0.0.1/webhooks/orders", allow), Refused)


def test_a_send_connects_to_the_address_checked_with_the_names_host_and_sni() -> None:
    """Invariant: the request goes to the address just checked (no second lookup a rebinder could answer), with
    the Host header and, over TLS, the server name of the original URL; an allowlisted target is asked as it is."""
    from domain.endpoints.urls import pinned

    resolve = fake({"hooks.example.com": ["93.184.216.34"], "v6.example.com": ["2606:2800:220:1::1"]})
    got = check("https://hooks.example.com/outbox?x=1", resolve=resolve)
    assert isinstance(got, Allowed)
    p = pinned("https://hooks.example.com/outbox?x=1", got)
    assert (p.url, p.host, p.sni) == ("https://93.184.216.34:443/outbox?x=1", "hooks.example.com", "hooks.example.com")
    v6 = check("http://v6.example.com:8080/h", resolve=resolve)
    assert isinstance(v6, Allowed)
    p6 = pinned("http://v6.example.com:8080/h", v6)
    assert (p6.url, p6.host, p6.sni) == ("http://[2606:2800:220:1::1]:8080/h", "v6.example.com:8080", None)
    dev = check("http://127.0.0.1:8090/webhooks/orders", frozenset({"127.0.0.1:8090"}))
    assert isinstance(dev, Allowed) and pinned("http://127.0.0.1:8090/webhooks/orders", dev).url == \
        "http://127.0.0.1:8090/webhooks/orders"


@pytest.mark.parametrize("url", [
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254 (cloud metadata)
    "http://[2002:0a00:0001::]/",  # 6to4 of 10.0.0.1
    "http://sixtofour.example/",  # a name answering one
])
def test_an_ipv4_address_embedded_in_6to4_is_judged_as_that_address(url: str) -> None:
    """Invariant: a 6to4 address (2002::/16) carries an IPv4 address the packet is delivered to; a private,
    loopback or metadata one inside it is refused like the bare address (Python 3.11 calls 2002::/16 global)."""
    resolve = fake({"sixtofour.example": ["2002:a9fe:a9fe::"]})
    assert isinstance(check(url, resolve=resolve), Refused), url


def test_a_public_ipv4_address_in_6to4_passes() -> None:
    assert isinstance(check("http://[2002:5db8:d822::1]/"), Allowed)  # 6to4 of 93.184.216.34


def test_the_system_resolvers_preference_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant: a send connects to the address the system prefers (getaddrinfo's order, RFC 6724: no IPv6 first
    on a host without an IPv6 route), not the alphabetically first: '2606:…' sorts before '93.…', and on an
    IPv4-only worker every send to a dual-stack endpoint failed, its breaker opened and the endpoint was disabled."""
    import socket

    from domain.endpoints import urls

    answers = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443)),
               (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2606:2800:220:1::1", 443, 0, 0)),
               (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: answers)
    assert urls.system_resolver("hooks.example.com", 443) == ["93.184.216.34", "2606:2800:220:1::1"]
    got = check("https://hooks.example.com/x")
    assert isinstance(got, Allowed) and got.addresses[0] == "93.184.216.34"

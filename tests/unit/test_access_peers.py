"""Which address a request is counted under (domain/access/peers.py, `OUTBOX_TRUSTED_PROXIES`).

Invariants: nobody trusted (the default) ignores X-Forwarded-For altogether; behind trusted proxies the client is
the right-most forwarded address that is not one of them, never the left-most (what the caller wrote); garbage in
the header never becomes a client address; a bad setting stops start-up naming the variable and the entry.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.access.peers import client_address, parse_networks
from domain.settings import SettingsError, reload_settings

PROXY = parse_networks("127.0.0.1, 10.0.0.0/8")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    monkeypatch.undo()
    reload_settings()


def test_nobody_trusted_the_peer_is_the_client() -> None:
    assert client_address("127.0.0.1", "203.0.113.9", ()) == "127.0.0.1"
    assert client_address("203.0.113.5", "198.51.100.1", PROXY) == "203.0.113.5"  # an untrusted peer's header


def test_the_right_most_untrusted_address_counts() -> None:
    assert client_address("127.0.0.1", "203.0.113.9", PROXY) == "203.0.113.9"
    # the caller wrote 198.51.100.1; our proxies appended 203.0.113.9 (what they saw) and 10.1.2.3
    assert client_address("127.0.0.1", "198.51.100.1, 203.0.113.9,10.1.2.3", PROXY) == "203.0.113.9"
    assert client_address("127.0.0.1", "10.9.9.9, 10.1.2.3", PROXY) == "10.9.9.9"  # all ours: the left-most
    assert client_address("127.0.0.1", None, PROXY) == "127.0.0.1"
    assert client_address("::ffff:127.0.0.1", "203.0.113.9", PROXY) == "203.0.113.9"


def test_garbage_stops_at_the_hop_that_passed_it_on() -> None:
    assert client_address("127.0.0.1", "evil, 10.1.2.3", PROXY) == "10.1.2.3"
    assert client_address("127.0.0.1", "', drop table", PROXY) == "127.0.0.1"


def test_a_bad_entry_stops_start_up_naming_it(env: pytest.MonkeyPatch) -> None:
    env.setenv("OUTBOX_TRUSTED_PROXIES", "10.0.0.0/8, nginx")
    with pytest.raises(SettingsError, match=r"OUTBOX_TRUSTED_PROXIES=.*'nginx' is not an IP address"):
        reload_settings()
    env.setenv("OUTBOX_TRUSTED_PROXIES", "10.0.0.0/8 ::1")
    assert [str(n) for n in reload_settings().trusted_networks] == ["10.0.0.0/8", "::1/128"]

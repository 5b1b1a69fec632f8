"""Development only: an endpoint pointed at the mock receiver (`OUTBOX_RECEIVER_URL`) gets its secret handed over
to the mock through the mock's own API (`PUT /endpoint-secrets/{name}`, which the mock answers only with
RECEIVER_SECRETS_API on), so signed events to it — a test event first — verify there. The mock keeps it in its own
database: it still shares no table or code with us. Called after an endpoint is created or rotated, and again
before a test event to it (`hand_over_current`: an endpoint made before, or a mock restarted empty since);
best-effort (the endpoint is made, the test sent, whatever the mock says). The secret goes in the request body
only: never in a URL or a log.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import httpx

from domain.endpoints import store
from domain.settings import get_settings

log = logging.getLogger("outbox.endpoints")
TIMEOUT_S = 3.0


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        u = urlsplit(url)
        return (u.scheme.lower(), (u.hostname or "").lower(), u.port or (443 if u.scheme == "https" else 80))
    except ValueError:
        return None


def points_at_mock(url: str) -> bool:
    """In development, the URL is on the mock receiver's origin (scheme, host and port of OUTBOX_RECEIVER_URL)."""
    s = get_settings()
    if not s.dev_mode:
        return False
    mine = _origin(url)
    return mine is not None and mine == _origin(s.receiver_url)


def name_for(tenant_id: int, endpoint_id: int) -> str:
    return f"t{tenant_id}-endpoint-{endpoint_id}"


def hand_over(tenant_id: int, endpoint_id: int, url: str, secret: str) -> bool:
    """True when the mock now holds the endpoint's secret; False (nothing sent) when the URL is not the mock's or
    we are not in development, or when the mock refused or could not be reached (said in the log, without the
    secret)."""
    if not points_at_mock(url):
        return False
    base = get_settings().receiver_url.rstrip("/")
    try:
        r = httpx.put(f"{base}/endpoint-secrets/{name_for(tenant_id, endpoint_id)}", json={"secret": secret},
                      timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        log.warning("mock receiver not told endpoint %s's secret: %s", endpoint_id, type(exc).__name__)
        return False
    if r.status_code >= 300:
        log.warning("mock receiver refused endpoint %s's secret: HTTP %s", endpoint_id, r.status_code)
        return False
    return True


def hand_over_current(tenant_id: int, endpoint_id: int) -> bool:
    """`hand_over` with the endpoint's current secret, read here (development only, and only for an enabled
    endpoint on the mock's origin: nothing is read otherwise)."""
    if not get_settings().dev_mode:
        return False
    target = store.send_target(tenant_id, endpoint_id)
    if target is None or not points_at_mock(target.url):
        return False
    return hand_over(tenant_id, endpoint_id, target.url, target.secrets[0])

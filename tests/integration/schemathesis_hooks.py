"""Schemathesis hooks for tests/integration/test_dashboard_api_conformance.py (loaded by file path via
SCHEMATHESIS_HOOKS).

Idempotency-Key: schemathesis generates header values independently per case, so two cases often share a key
("0") with different bodies, which the API rightly answers 422 `idempotency_key_reused` — a stateful contract
the generator cannot know about (tests/integration/test_dashboard_api_idempotency.py proves it). So every *valid*
generated key gets a fresh suffix (still valid); an invalid one (negative testing) is sent as generated.

Unknown keys: the auth check sends an invalid key to every operation, and the API rightly throttles a flood of
unknown keys from one address (a burst of 20, then one every 3 s: 429 before any lookup, proven in
test_dashboard_api_guard.py). With 60-odd operations the run outgrows that budget and an invalid key is answered 429
where the check insists on 401. So before each call the throttle's bucket for this address is emptied: each invalid
key meets the key check itself.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

import redis
import schemathesis

from dashboard.api.deps import UNKNOWN_KEY_KEY

_redis = redis.Redis.from_url(os.environ["OUTBOX_REDIS_URL"])

_VALID = re.compile(r"^[!-~]{1,255}$")  # what the API takes (domain/access/idempotency.valid_key)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    buckets = list(_redis.scan_iter(f"{UNKNOWN_KEY_KEY}*"))
    if buckets:
        _redis.delete(*buckets)
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key" and isinstance(headers[name], str) and _VALID.match(headers[name]):
            headers[name] = f"{headers[name][:200]}-{uuid.uuid4().hex}"  # still <= 255

"""Schemathesis hooks for tests/integration/test_dashboard_api_conformance.py (loaded by file path via SCHEMATHESIS_HOOKS).

Idempotency-Key: schemathesis generates header values independently per case, so two cases often share a key
("0") with different bodies, which the API rightly answers 422 `idempotency_key_reused` — a stateful contract
the generator cannot know about (tests/integration/test_dashboard_api_idempotency.py proves it). So every *valid* generated key
gets a fresh suffix (still valid); an invalid one (negative testing) is sent as generated.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import schemathesis

_VALID = re.compile(r"^[!-~]{1,255}$")  # what the API takes (domain/access/idempotency.valid_key)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    headers = case.headers or {}
    for name in list(headers):
        if name.lower() == "idempotency-key" and isinstance(headers[name], str) and _VALID.match(headers[name]):
            headers[name] = f"{headers[name][:200]}-{uuid.uuid4().hex}"  # still <= 255

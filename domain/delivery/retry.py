"""Pure failure classification and backoff: (outcome, attempt, now) -> decision value."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

ErrorClass = Literal[
    "timeout", "connection", "rate_limited", "server_error", "contract", "identity_conflict", "unknown",
    "url_not_allowed",
]


@dataclass(frozen=True)
class Outcome:
    """What one attempt observed. `status_code` is None when no HTTP response arrived."""

    status_code: int | None
    # url_not_allowed: a tenant endpoint's address was refused at send time (after DNS); nothing was sent.
    error: Literal["timeout", "connection", "url_not_allowed"] | None = None
    body_status: str | None = None
    excerpt: str | None = None  # the start of the response body, kept on the attempt for support


@dataclass(frozen=True)
class Succeeded:
    already_processed: bool


@dataclass(frozen=True)
class Retry:
    error_class: ErrorClass
    delay_seconds: float


@dataclass(frozen=True)
class Fail:
    """Terminal: `review` means a human should look (contract problem), not merely exhausted retries."""

    error_class: ErrorClass
    review: bool


RetryDecision = Succeeded | Retry | Fail


def classify(outcome: Outcome) -> tuple[Literal["ok", "transient", "permanent"], ErrorClass | None]:
    if outcome.error == "timeout":
        return "transient", "timeout"
    if outcome.error == "url_not_allowed":  # DNS may point back; the endpoint's breaker ends a run of these
        return "transient", "url_not_allowed"
    if outcome.error == "connection" or outcome.status_code is None:
        return "transient", "connection"
    code = outcome.status_code
    if 200 <= code < 300:
        return "ok", None
    if code == 429:
        return "transient", "rate_limited"
    if code >= 500:
        return "transient", "server_error"
    if code == 409:
        return "permanent", "identity_conflict"
    if 400 <= code < 500:
        return "permanent", "contract"
    return "permanent", "unknown"


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]. Bounded, never negative."""
    ceiling = min(cap, base * (2 ** max(0, min(attempt - 1, 32))))
    return rng.uniform(0.0, ceiling)


def decide_retry(
    outcome: Outcome, attempt: int, max_attempts: int, base: float, cap: float, rng: random.Random
) -> RetryDecision:
    kind, error_class = classify(outcome)
    if kind == "ok":
        return Succeeded(already_processed=outcome.body_status == "already_processed")
    assert error_class is not None
    if kind == "permanent":
        return Fail(error_class, review=True)
    if attempt >= max_attempts:
        return Fail(error_class, review=False)
    return Retry(error_class, backoff_seconds(attempt, base, cap, rng))

"""Invariant: transient failures retry with bounded full-jitter backoff; contract errors go to review; exhausted
attempts fail visibly; 2xx (including already_processed) succeeds."""

import random

from hypothesis import given
from hypothesis import strategies as st

from domain.delivery.retry import Fail, Outcome, Retry, Succeeded, backoff_seconds, classify, decide_retry


@given(st.integers(1, 200), st.floats(0.01, 10), st.floats(0.1, 1000), st.integers(0, 2**32))
def test_backoff_is_bounded_and_non_negative(attempt, base, cap, seed):
    d = backoff_seconds(attempt, base, cap, random.Random(seed))
    assert 0.0 <= d <= min(cap, base * 2 ** (attempt - 1)) + 1e-9


@given(st.sampled_from([429, 500, 502, 503, 504]), st.integers(1, 7))
def test_transient_http_errors_retry(code, attempt):
    d = decide_retry(Outcome(code), attempt, 8, 1.0, 60.0, random.Random(attempt))
    assert isinstance(d, Retry)


@given(st.sampled_from(["timeout", "connection"]))
def test_network_errors_retry(kind):
    """A timeout or a dropped connection says nothing about the message: it is retried, never failed."""
    assert isinstance(decide_retry(Outcome(None, error=kind), 1, 8, 1, 60, random.Random(1)), Retry)


@given(st.sampled_from([400, 401, 403, 404, 410, 422]))
def test_contract_errors_go_to_review(code):
    d = decide_retry(Outcome(code), 1, 8, 1, 60, random.Random(0))
    assert isinstance(d, Fail) and d.review and d.error_class == "contract"


def test_identity_conflict_is_permanent():
    d = decide_retry(Outcome(409), 1, 8, 1, 60, random.Random(0))
    assert isinstance(d, Fail) and d.error_class == "identity_conflict"


def test_exhausted_attempts_fail_visibly_without_review_flag():
    d = decide_retry(Outcome(503), 8, 8, 1, 60, random.Random(0))
    assert isinstance(d, Fail) and not d.review and d.error_class == "server_error"


@given(st.integers(200, 299))
def test_2xx_succeeds(code):
    """Any 2xx is the other side's acceptance, whatever attempt it came on."""
    assert isinstance(decide_retry(Outcome(code), 3, 8, 1, 60, random.Random(0)), Succeeded)


def test_already_processed_is_success():
    d = decide_retry(Outcome(200, body_status="already_processed"), 2, 8, 1, 60, random.Random(0))
    assert d == Succeeded(already_processed=True)
    assert classify(Outcome(200)) == ("ok", None)

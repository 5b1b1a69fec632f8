"""Structured logs: every process (API/dashboard, lane workers, relay) writes JSON lines to stderr at
`OUTBOX_LOG_LEVEL`, each with its `process` and whatever is bound for the work at hand — `tenant`, `event_id`,
`notification_id`, `lane`, `attempt`, `request_id` — so one event is followed across processes with
`grep <event id> .run/logs/*.log`. (The receiver, which imports nothing of ours, does the same in its own
`receiver/logs.py`.)

Bind with `bind(...)` (a context manager) or `bind_here(...)` (for the rest of the current task: arq runs each job
in its own task, so a job's fields end with it). Log with `get_logger(name)` (structlog, keyword fields) or the
standard library with `extra={...}` — both become one JSON object per line.

Never in a log: secrets, one-time codes, contact points. Fields named like them are replaced by `[redacted]`, and
every string is swept for e-mail addresses, E.164 phone numbers, API keys and webhook secrets, as a last line of
defence (tests/integration/test_logs.py drives a code and a webhook and greps every process's log).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog

# Field names whose values never reach a log, whatever they hold.
SECRET_FIELDS = frozenset({"authorization", "secret", "password", "code", "otp", "token", "api_key", "key",
                           "to", "contact", "phone", "email", "body", "text", "idempotency_key_value"})
_SWEEPS = (
    (re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"), "[email]"),
    (re.compile(r"\+\d{7,15}\b"), "[phone]"),
    (re.compile(r"\b(obx_[A-Za-z0-9_-]{4})[A-Za-z0-9_-]+"), r"\1…"),  # an API key keeps only its listed prefix
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=]+"), "whsec_[redacted]"),
)
_configured: str | None = None


def sweep(text: str) -> str:
    for pattern, replacement in _SWEEPS:
        text = pattern.sub(replacement, text)
    return text


def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for k, v in list(event.items()):
        if k.lower() in SECRET_FIELDS:
            event[k] = "[redacted]"
        elif isinstance(v, str):
            event[k] = sweep(v)
    return event


def configure(process: str, level: str | None = None) -> None:
    """Once per process, at its entry point: JSON lines on stderr for structlog and the standard library alike
    (uvicorn's and arq's loggers included)."""
    global _configured
    if _configured == process:
        return
    _configured = process
    if level is None:
        from domain.settings import get_settings

        level = get_settings().log_level
    name = process

    def add_process(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        event.setdefault("process", name)
        return event

    shared: list[Any] = [structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
                         structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(),
                         structlog.processors.TimeStamper(fmt="iso", utc=True), add_process]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(), wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, redact, structlog.processors.JSONRenderer()]))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn", "uvicorn.error", "uvicorn.access", "arq", "arq.worker", "arq.jobs"):
        lg = logging.getLogger(noisy)
        lg.handlers, lg.propagate = [], True
    # Each API request is one line of ours (dashboard/api/guard.py), with its request id: uvicorn's access line,
    # which carries the query string (a search term may be a phone number), stays off.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    for chatty in ("httpx", "httpcore", "asyncio"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, root.level))


def get_logger(name: str) -> Any:
    return structlog.stdlib.get_logger(name)


@contextmanager
def bind(**fields: Any) -> Iterator[None]:
    with structlog.contextvars.bound_contextvars(**{k: v for k, v in fields.items() if v is not None}):
        yield


def bind_here(**fields: Any) -> None:
    """For the rest of the current task (an arq job, a request): fields are dropped when the task ends."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in fields.items() if v is not None})

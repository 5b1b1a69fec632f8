"""The receiver's JSON log lines (it imports nothing of ours, so this mirrors domain/logs.py in a few lines):
one object per line on stderr with `process: receiver` and the fields bound for the request (`event_id`), so an
event is followed from our processes into the outside world with one `grep`. No contact point is ever logged."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure() -> None:
    level = os.environ.get("RECEIVER_LOG_LEVEL") or os.environ.get("OUTBOX_LOG_LEVEL") or "INFO"
    shared: list[object] = [structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
                            structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder(),
                            structlog.processors.TimeStamper(fmt="iso", utc=True),
                            lambda _, __, e: {**e, "process": "receiver"}]
    structlog.configure(processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
                        logger_factory=structlog.stdlib.LoggerFactory(),
                        wrapper_class=structlog.stdlib.BoundLogger)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,  # type: ignore[arg-type]
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers, logging.getLogger(name).propagate = [], True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)

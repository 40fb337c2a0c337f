"""structlog configuration: JSON lines on stdout when not a TTY (journald, files), readable on a TTY.

Every log line passes ``redact`` as its last step before rendering (after the traceback is formatted):
the daemon's :class:`~supervisor.adapters.secrets.SecretBook` masks every secret value it knows and
every secret shape (:mod:`supervisor.core.spec.secrets`), so the journal never holds one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

from supervisor.core.spec.secrets import Redactor

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
Redact = Callable[[MutableMapping[str, Any]], MutableMapping[str, Any]]


def masking(redact: Redact) -> structlog.typing.Processor:
    """The processor that masks a log line's every value (and key) with ``redact``."""

    def mask(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        return redact(event_dict)

    return mask


def configure(level: str = "info", json: bool | None = None, redact: Redact | None = None) -> None:
    """Configure structlog once for the daemon process (``redact``: the secret book's ``data``)."""
    as_json = not sys.stdout.isatty() if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            masking(redact or Redactor().data),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=True,
    )

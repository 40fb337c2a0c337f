"""``vllm-supervisor --config PATH [--state-dir DIR] [--socket PATH]``: run the daemon in the foreground.

Logging: JSON lines on stdout when not a TTY (journald, files), readable on a TTY. Every log line passes
``redact`` as its last step before rendering (after the traceback is formatted): the daemon's
:class:`~supervisor.adapters.secrets.SecretBook` masks every secret value it knows and every secret shape
(:mod:`supervisor.core.spec.secrets`), so the journal never holds one.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from supervisor import __version__
from supervisor.adapters.host.memalloc import fix_mmap_threshold, limit_arenas
from supervisor.adapters.secrets import SecretBook
from supervisor.config import load_config
from supervisor.core.clock import SystemClock
from supervisor.core.errors import ConfigError, SupervisorError
from supervisor.core.host.paths import DEFAULT_CONFIG
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vllm-supervisor",
        description="Keep vLLM model servers in Docker alive 7x24 (foreground daemon; see supervisorctl).",
    )
    p.add_argument(
        "--config", default=str(DEFAULT_CONFIG), help=f"daemon config file (default {DEFAULT_CONFIG})"
    )
    p.add_argument("--state-dir", type=Path, help="override the config's state_dir")
    p.add_argument("--socket", type=Path, help="override the config's control socket path")
    p.add_argument("--restore-dir", type=Path, help="override the config's restore_dir")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="override log_level")
    p.add_argument("--version", action="version", version=f"vllm-supervisor {__version__}")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"vllm-supervisor: {problem}", file=sys.stderr)
        return 2
    overrides: dict[str, object] = {}
    if args.state_dir is not None:
        overrides["state_dir"] = args.state_dir.resolve()
    if args.socket is not None:
        overrides["socket_path"] = args.socket.resolve()
    if args.restore_dir is not None:
        overrides["restore_dir"] = args.restore_dir.resolve()
    if args.log_level is not None:
        overrides["log_level"] = args.log_level
    config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
    book = SecretBook()  # what the log lines, events, alerts and replies are masked with
    book.learn_config(config)
    configure(config.log_level, redact=book.data)

    from supervisor.daemon import build_daemon  # after logging is configured

    limit_arenas()  # before the first thread: its RSS must not creep over weeks (adapters/host/memalloc.py)
    fix_mmap_threshold()  # big blocks stay mmapped, not in the heaps, after the first one is freed (same)

    try:
        daemon = build_daemon(config, SystemClock(), secrets=book)
    except SupervisorError as exc:
        print(f"vllm-supervisor: {exc}", file=sys.stderr)
        return 1

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        daemon.request_stop()

    def on_hangup(signum: int, _frame: FrameType | None) -> None:
        daemon.request_reload()  # only posts: the loop re-reads the config

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hangup)
    try:
        return daemon.run()
    except SupervisorError as exc:
        print(f"vllm-supervisor: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

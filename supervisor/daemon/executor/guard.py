"""The loop's own guard, the I/O: an exception escaping a part of the loop is logged with its traceback,
recorded, and alerted once (the decision: core/fleet/guard.py); supervision goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog

from supervisor.core.fleet.guard import GuardState, on_error
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import ReplyBox

log = structlog.get_logger("supervisor.daemon")


class LoopGuard:
    """Run each part of the loop through :meth:`run` (or call :meth:`crashed` from an ``except``)."""

    def __init__(self, records: Records) -> None:
        self._records = records
        self._state = GuardState()
        self._lock = threading.Lock()

    def crashed(self, where: str, exc: BaseException) -> None:
        """One exception that escaped ``where`` (never raises itself: this is the last line)."""
        try:
            with self._lock:
                self._state, verdict = on_error(self._state, where, type(exc).__name__, str(exc))
            if verdict.log:
                log.error("daemon.internal_error", where=where, count=verdict.count, exc_info=exc)
            if verdict.alert is not None:
                self._records.emit("", "daemon.internal_error", {"where": where, "error": type(exc).__name__})
                self._records.alert("", "", verdict.alert, None)
        except Exception:  # the guard must not become the crash
            log.exception("daemon.guard_failed", where=where)

    def run(self, where: str, fn: Callable[..., object], *args: Any, reply: ReplyBox | None = None) -> None:
        """``fn(*args)``; an exception is :meth:`crashed` and a request's caller still gets an answer: one
        part's bug never stops the loop or the other parts."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - supervision goes on
            self.crashed(where, exc)
            if reply is not None and not reply.done.is_set():
                reply.set(False, f"internal error in the daemon ({type(exc).__name__}); see its journal")

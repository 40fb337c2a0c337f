"""Injected time: ``monotonic()`` for intervals inside one process, ``now()`` for timestamps.

Decisions that must survive a daemon restart (breaker window, backoff deadline, manual-stop time)
use ``now()`` (epoch seconds), because a monotonic clock restarts with the host. Everything else
uses ``monotonic()``. Tests use :class:`FakeClock` and advance it explicitly.
:func:`format_duration` is the one way a duration reads for people (alerts, status, CLI, restore).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What the core needs to know about time."""

    def now(self) -> float:
        """Wall-clock epoch seconds (for timestamps, persisted deadlines and cron)."""
        ...

    def monotonic(self) -> float:
        """Monotonic seconds (for intervals and deadlines that live in one process)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to; thread-safe so watcher threads may read it."""

    def __init__(self, start: float = 1_790_000_000.0, mono_start: float = 1000.0) -> None:
        self._wall = start
        self._mono = mono_start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (must be >= 0)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._wall += seconds
            self._mono += seconds


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``2 h 13 min``, ``1 d 4 h`` (whole units, two at most, never negative)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"

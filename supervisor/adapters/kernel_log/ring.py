"""The newest kernel events of interest the follower read, kept for the failed-start diagnosis.

The kernel-log follower (:mod:`supervisor.adapters.kernel_log.follower`) reads /dev/kmsg for the daemon's
whole
life; every classified event also goes into this bounded ring, so a failed start is diagnosed from
what the follower already read instead of running ``dmesg`` again (``supervisorctl diagnose --kernel``
still does, offline). Thread-safe: the follower thread adds, a pool job reads.

The follower marks the ring *drained* whenever a read or poll found nothing more (at least every poll
interval while it runs), stamped with the time taken *before* that read or poll; :meth:`KernelRing.since`
waits, boundedly, for a drain stamped after the call, so a line the kernel logged before the call is in
the answer (through ``dmesg --follow`` the pipe adds a delay: there it is best effort).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

#: How many classified kernel events are kept (they are rare: a failure prints a handful).
RING_SIZE = 256
#: How long :meth:`KernelRing.since` waits for the follower to read what was logged before the call.
SETTLE_S = 1.0


class Stamped(Protocol):
    """What the ring needs of an event: its wall time (epoch seconds)."""

    @property
    def ts(self) -> float: ...


E = TypeVar("E", bound=Stamped)


class KernelRing(Generic[E]):
    """A bounded, thread-safe ring of the newest kernel events and how far the follower has read."""

    def __init__(self, size: int = RING_SIZE, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._events: deque[E] = deque(maxlen=size)
        self._monotonic = monotonic
        self._cond = threading.Condition()
        self._drained_at: float | None = None

    def add(self, event: E) -> None:
        """Keep one classified event (the oldest goes once the ring is full)."""
        with self._cond:
            self._events.append(event)

    def now(self) -> float:
        """The ring's monotonic clock (the follower stamps a read attempt with it before making it)."""
        return self._monotonic()

    def mark_drained(self, at: float) -> None:
        """The follower has read everything the kernel had logged by ``at`` (a :meth:`now` taken before
        the read or poll that found nothing more)."""
        with self._cond:
            if self._drained_at is None or at > self._drained_at:
                self._drained_at = at
            self._cond.notify_all()

    def since(self, ts: float, settle_s: float = SETTLE_S) -> list[E]:
        """The kept events logged at or after wall time ``ts``, oldest first, once the follower has read
        what was logged before this call (waiting at most ``settle_s``)."""
        asked = self._monotonic()
        with self._cond:
            self._cond.wait_for(
                lambda: self._drained_at is not None and self._drained_at >= asked, timeout=settle_s
            )
            return [e for e in self._events if e.ts >= ts]

    def __len__(self) -> int:
        with self._cond:
            return len(self._events)

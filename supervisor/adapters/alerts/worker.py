"""One alert channel's bounded queue and the thread that drains it.

:class:`~supervisor.adapters.alerts.sender.AlertSender` gives every channel one :class:`ChannelWorker`, so a
dead or slow channel (its retries and backoff: seconds to a minute per message) delays only its own
messages, never another channel's. The worker knows nothing about alerts: it hands each item to
``handle`` (which delivers and reports it, and must not raise) in order, one at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import structlog

from supervisor.adapters.threads import Supervised, checkpoint, supervised

log = structlog.get_logger("supervisor.notify")

T = TypeVar("T")


class ChannelWorker(Generic[T]):
    """A bounded FIFO (the oldest is dropped when full) and its lazily started daemon thread."""

    def __init__(self, name: str, max_queue: int, handle: Callable[[T], None]) -> None:
        self.name = name  # the channel's label: the thread is ``alert-sender-<name>``
        self._max_queue = max(1, max_queue)
        self._handle = handle
        self._queue: deque[T] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: Supervised | None = None

    def put(self, item: T) -> T | None:
        """Queue ``item`` (never blocks); the item dropped to make room, if any. Ignored once closed
        (the sender checks that first)."""
        with self._cond:
            if self._closed:
                return None
            dropped = self._queue.popleft() if len(self._queue) >= self._max_queue else None
            self._queue.append(item)
            if self._thread is None:
                name = f"alert-sender-{self.name}"
                self._thread = supervised(name, self._run)
            self._cond.notify_all()
            return dropped

    def pending(self) -> int:
        """Items queued or being handled."""
        with self._cond:
            return len(self._queue) + (1 if self._busy else 0)

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until nothing is queued or being handled; True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, max(0.0, timeout))

    def close(self) -> None:
        """Take no more; the thread ends once the queue is empty."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the thread to end (after :meth:`close`); True if it has (or none)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(max(0.0, timeout))
        return not thread.is_alive()

    def drain(self) -> list[T]:
        """Take every item still queued (not the one being handled), oldest first."""
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
            return left

    def _run(self) -> None:
        while True:
            checkpoint(f"alert-sender-{self.name}")
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                self._handle(item)
            except Exception:  # the thread must survive to send the next one
                log.exception("alert.worker_crashed", channel=self.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

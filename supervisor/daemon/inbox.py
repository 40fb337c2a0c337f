"""The daemon's one event queue: every thread posts here, only the loop takes from it."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from supervisor.core.events import Event
from supervisor.core.fleet.events import FleetEvent


class ReloadRequest:
    """Re-read the config (``supervisorctl reload``, SIGHUP). Daemon-wide, not per profile."""


#: Daemon-wide items (not for one profile): the fleet step's events (core/fleet/events.py) and a reload.
DaemonEvent = FleetEvent | ReloadRequest


#: Answers an operator command (``ReplyBox.set``): ok, message.
ReplyFn = Callable[[bool, str], None]


@dataclass
class ReplyBox:
    """Where the loop puts its answer to an operator command (the control thread waits on it)."""

    done: threading.Event
    ok: bool = False
    message: str = ""

    def set(self, ok: bool, message: str) -> None:
        self.ok, self.message = ok, message
        self.done.set()


@dataclass(frozen=True)
class Envelope:
    """One queued item: an event for a profile (``profile`` None: for the daemon itself)."""

    profile: str | None
    event: Event | DaemonEvent
    reply: ReplyBox | None = None


class Inbox:
    """A thread-safe queue of envelopes; ``None`` wakes the loop to check its stop flag."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Envelope | None] = queue.Queue()

    def post(self, profile: str, event: Event) -> None:
        """Queue an event for a profile (any thread)."""
        self._queue.put(Envelope(profile, event))

    def post_daemon(self, event: DaemonEvent) -> None:
        """Queue a daemon-wide observation for the fleet step (any thread)."""
        self._queue.put(Envelope(None, event))

    def command(self, profile: str, event: Event) -> ReplyBox:
        """Queue an operator command; the loop answers in the returned box."""
        box = ReplyBox(threading.Event())
        self._queue.put(Envelope(profile, event, box))
        return box

    def command_daemon(self, event: ReloadRequest) -> ReplyBox:
        """Queue a daemon-wide operator command; the loop answers in the returned box."""
        box = ReplyBox(threading.Event())
        self._queue.put(Envelope(None, event, box))
        return box

    def wake(self) -> None:
        self._queue.put(None)

    def get(self, timeout: float) -> Envelope | None:
        """The next envelope, or None after ``timeout`` seconds (or on a wake-up)."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

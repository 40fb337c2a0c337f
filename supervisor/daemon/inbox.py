"""The daemon's one event queue: every thread posts here, only the loop takes from it."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from supervisor.adapters.kernel_log.follower import KernelLogEvent
from supervisor.adapters.threads import ThreadCrash
from supervisor.core.events import Event


@dataclass(frozen=True)
class DockerPing:
    """The Docker engine answered a ping (``ok``) or did not (``error``). Daemon-wide, not per profile."""

    ok: bool
    error: str | None = None


@dataclass(frozen=True)
class KernelLogLost:
    """The kernel ring buffer wrapped before the follower read ``records`` records (they are lost)."""

    records: int

    def record(self) -> tuple[str, dict[str, object]]:
        """The daemon history event (name, fields)."""
        return "kernel_log.lost", {"records": self.records}


@dataclass(frozen=True)
class KernelLogHeld:
    """Lines naming another's process held back from the history in one window (core/host/kernel_quota.py)."""

    kind: str
    lines: int
    since: float  # monotonic start of the window

    def record(self) -> tuple[str, dict[str, object]]:
        """The daemon history event (name, fields)."""
        return "kernel.held_back", {"kind": self.kind, "lines": self.lines}


@dataclass(frozen=True)
class CompanionChecked:
    """A companion check answered (``supervisor.daemon.duties.companions``); the loop applies it, not the
    machine."""

    profile: str
    name: str
    ok: bool
    status: int | None
    error: str | None = None


class ReloadRequest:
    """Re-read the config (``supervisorctl reload``, SIGHUP). Daemon-wide, not per profile."""


#: Daemon-wide observations (not for one profile): the loop decides what each means for the profiles.
DaemonEvent = (
    DockerPing
    | KernelLogEvent
    | KernelLogLost
    | KernelLogHeld
    | CompanionChecked
    | ReloadRequest
    | ThreadCrash
)
#: Daemon-wide observations that are only recorded (their ``record()``: the history event).
RecordOnly = KernelLogLost | KernelLogHeld | ThreadCrash


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
        """Queue a daemon-wide observation (any thread)."""
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

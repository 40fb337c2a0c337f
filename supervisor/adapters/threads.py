"""Long-lived threads under one small supervisor: a crash is reported and the body runs again.

Every long-lived thread of the daemon (the Docker pinger, each container's event watcher and log
follower, the control socket's accept loop, the metrics server and its bind retry, the kernel-log
follower, the flight recorder, the alive record, the alert channels' senders) runs its body through
:class:`Supervised`. An exception escaping the body is logged with its traceback, counted in the
:class:`ThreadBook` (``supervisorctl status``: ``daemon.threads``) and handed to the book's listeners
(the daemon records ``daemon.thread.crashed``); then the body runs again after a capped exponential
pause (:data:`RESTART_INITIAL_S` doubling up to :data:`RESTART_MAX_S`). A body that ran for
:data:`STEADY_S` before crashing starts a new streak; after :data:`MAX_STREAK` crashes in a row the
thread is given up (``daemon.thread.gave_up``: it would only crash again). The body returning, or the
thread's ``stop`` event being set, ends the thread quietly.

:func:`checkpoint` is the test hook: a long-lived body calls it once per round with its thread's name;
it does nothing unless a test set a hook for that name (:func:`set_test_hook`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from supervisor.core.backoff import Backoff

log = structlog.get_logger("supervisor.threads")

RESTART_INITIAL_S = 1.0
RESTART_MAX_S = 60.0
#: A body that ran this long before it crashed starts a new streak (the pause is back to the first).
STEADY_S = 600.0
#: Crashes in a row (each within STEADY_S of its start) after which the thread is not started again.
MAX_STREAK = 30
#: Names the book keeps counts for (per-container threads come and go).
MAX_NAMES = 256


@dataclass(frozen=True)
class ThreadCrash:
    """One crash of a supervised thread, as reported to the book's listeners."""

    name: str
    error: str  # "RuntimeError: boom"
    streak: int  # crashes in a row, this one included
    restart_in_s: float | None  # None: given up

    def record(self) -> tuple[str, dict[str, Any]]:
        """The daemon history event of this crash (name, fields)."""
        name = "daemon.thread.gave_up" if self.restart_in_s is None else "daemon.thread.crashed"
        fields = {"thread": self.name, "error": self.error, "streak": self.streak}
        return name, fields | {"restart_in_s": self.restart_in_s}


class ThreadBook:
    """Which supervised threads run, how often each crashed; who is told of a crash (any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: dict[str, int] = {}  # name -> running threads of that name
        self._crashes: dict[str, tuple[int, str | None, float | None, bool]] = {}  # count, error, at, gave up
        self._listeners: list[Callable[[ThreadCrash], None]] = []

    def listen(self, fn: Callable[[ThreadCrash], None]) -> Callable[[], None]:
        """Tell ``fn`` of every crash from now on (it must not block); returns the unsubscribe."""
        with self._lock:
            self._listeners.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._listeners:
                    self._listeners.remove(fn)

        return unsubscribe

    def status(self) -> list[dict[str, Any]]:
        """For the status document (``daemon.threads``): every running supervised thread and every one
        that crashed, by name."""
        with self._lock:
            out = []
            for name in sorted(set(self._alive) | set(self._crashes)):
                count, error, at, given_up = self._crashes.get(name, (0, None, None, False))
                out.append(
                    {"name": name, "running": name in self._alive, "crashes": count, "last_error": error}
                    | {"last_crash_at": round(at, 3) if at is not None else None, "given_up": given_up}
                )
            return out

    def _began(self, name: str) -> None:
        with self._lock:
            self._alive[name] = self._alive.get(name, 0) + 1

    def _ended(self, name: str) -> None:
        with self._lock:
            left = self._alive.get(name, 1) - 1
            if left > 0:
                self._alive[name] = left
            else:
                self._alive.pop(name, None)

    def _crashed(self, crash: ThreadCrash) -> None:
        with self._lock:
            count = self._crashes.get(crash.name, (0, "", 0.0, False))[0] + 1
            if crash.name not in self._crashes and len(self._crashes) >= MAX_NAMES:
                self._crashes.pop(next(iter(self._crashes)))
            self._crashes[crash.name] = (count, crash.error, time.time(), crash.restart_in_s is None)
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn(crash)
            except Exception:  # a listener's bug must not end the thread it reports
                log.exception("daemon.thread.listener_failed", thread=crash.name)


#: The process's book (the daemon listens to it; a thread needs no wiring to be supervised).
BOOK = ThreadBook()
_HOOKS: dict[str, Callable[[], None]] = {}


def set_test_hook(prefix: str, hook: Callable[[], None] | None) -> None:
    """Tests only: every :func:`checkpoint` of a thread whose name starts with ``prefix`` calls ``hook``
    (it may raise, to make that thread crash for real); None removes it."""
    if hook is None:
        _HOOKS.pop(prefix, None)
    else:
        _HOOKS[prefix] = hook


def checkpoint(name: str) -> None:
    """Called by a supervised body once per round: the test hook for its thread, if any (else nothing)."""
    if not _HOOKS:
        return
    for prefix, hook in list(_HOOKS.items()):
        if name.startswith(prefix):
            hook()


def _ended() -> None:
    """The body of a supervised thread that has ended for good."""


class Supervised:
    """One supervised daemon thread: ``body`` runs until it returns or ``stop`` is set, restarted after
    a crash (module docstring). ``on_end`` runs once when the thread ends for good (cleanup)."""

    def __init__(
        self,
        name: str,
        body: Callable[[], None],
        stop: threading.Event | None = None,
        *,
        on_end: Callable[[], None] | None = None,
        book: ThreadBook = BOOK,
    ) -> None:
        self.name = name
        self._body = body
        self._stop = stop if stop is not None else threading.Event()
        self._on_end = on_end
        self._book = book
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        self._book._began(self.name)
        streak = 0
        try:
            for _ in range(10**9):  # bounded (MAX_STREAK ends a crash loop long before)
                began = time.monotonic()
                try:
                    self._body()
                    return
                except Exception as exc:  # the point: a crash must not end the thread
                    if self._stop.is_set():
                        return
                    streak = 1 if time.monotonic() - began >= STEADY_S else streak + 1
                    delay = Backoff.delay_for(streak, RESTART_INITIAL_S, 2.0, RESTART_MAX_S)
                    given_up = streak >= MAX_STREAK
                    log.exception("daemon.thread.crashed", thread=self.name, streak=streak, given_up=given_up)
                    error = f"{type(exc).__name__}: {exc}"[:500]
                    self._book._crashed(ThreadCrash(self.name, error, streak, None if given_up else delay))
                    if given_up or self._stop.wait(delay):
                        return
        finally:
            self._book._ended(self.name)
            on_end, self._on_end = self._on_end, None
            # Let go of the body: it is usually a bound method of the object that holds this thread, and
            # that cycle would keep the object (a container's watch, with its log tail) until a full
            # garbage collection, which a daemon runs seldom (adapters/host/memalloc.py).
            self._body = _ended
            if on_end is not None:
                on_end()


def supervised(
    name: str, body: Callable[[], None], stop: threading.Event | None = None, **kw: Any
) -> Supervised:
    """A started :class:`Supervised` thread."""
    thread = Supervised(name, body, stop, **kw)
    thread.start()
    return thread


class Periodic:
    """A supervised thread that runs ``once`` now and then every ``every_s`` until :meth:`stop` (the
    daemon's samplers and pingers: each only posts what it read)."""

    def __init__(self, name: str, every_s: float, once: Callable[[], None]) -> None:
        self._name = name
        self._every = every_s
        self._once = once
        self._stop = threading.Event()
        self._thread = Supervised(name, self._run, self._stop)  # a crash: restarted

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            checkpoint(self._name)
            self._once()
            self._stop.wait(self._every)

"""Watch one container: its Docker events (death within a second) and its log stream (load progress).

Each watcher runs in its own daemon thread and only *posts* events to the daemon's queue; it never
changes state. Threads end when the container dies, when the stream ends, or within about a second
of ``stop()``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import structlog

from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.core.errors import DockerError
from supervisor.core.events import (
    ContainerExited,
    Event,
    LogEngineDead,
    LogKvPool,
    LogMarker,
    LogProgress,
    LogReady,
    LogStartupFailure,
)
from supervisor.core.vllmlog.analyzer import LogAnalyzer, marker_matcher
from supervisor.core.vllmlog.signals import (
    EngineDead,
    KvPool,
    Phase,
    Ready,
    ShardProgress,
    StartupFailure,
)

log = structlog.get_logger("supervisor.watch")

#: Signals of an operator `docker stop` (SIGTERM / SIGINT); a SIGKILL is a crash to recover from.
_STOP_SIGNALS = frozenset({"15", "SIGTERM", "2", "SIGINT"})
#: How many recent log lines are kept for the failure diagnosis.
TAIL_LINES = 400


class ContainerWatch:
    """The two watcher threads of one container (by id) and what they learnt."""

    def __init__(
        self,
        docker: DockerAdapter,
        container_id: str,
        post: Callable[[Event], None],
        expected_stop: Callable[[], bool],
        since: float | None,
        logs_since: float | None = None,
        expected_markers: tuple[str, ...] = (),
        forbidden_markers: tuple[str, ...] = (),
    ) -> None:
        self.container_id = container_id
        self._docker = docker
        self._post = post
        self._expected_stop = expected_stop
        self._since = since
        self._logs_since = logs_since
        self._stop = threading.Event()
        self._analyzer = LogAnalyzer()
        self._markers = marker_matcher(list(expected_markers), list(forbidden_markers))
        self._lock = threading.Lock()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._kv_tokens: int | None = None
        self._exited = False
        self._threads = [
            threading.Thread(target=self._events, name=f"events-{container_id[:12]}", daemon=True),
            threading.Thread(target=self._logs, name=f"logs-{container_id[:12]}", daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Ask both threads to end (they do within about a second)."""
        self._stop.set()

    def tail_lines(self) -> list[str]:
        with self._lock:
            return list(self.tail)

    # ---- Docker events ----------------------------------------------------------------------------

    def _events(self) -> None:
        external = False
        oom = False
        try:
            for ev in self._docker.events(self.container_id, self._stop, since=self._since):
                action = ev.get("action")
                if action == "kill" and str(ev.get("signal")) in _STOP_SIGNALS and not self._expected_stop():
                    external = True
                elif action == "oom":
                    oom = True
                elif action == "die":
                    self._exit(ev.get("exit_code"), external and not self._expected_stop(), oom)
                    return
                elif action == "destroy":
                    self._exit(None, False, oom)
                    return
        except DockerError as exc:
            log.warning("watch.events_failed", container_id=self.container_id[:12], error=str(exc))

    def _exit(self, code: object, external: bool, oom: bool) -> None:
        with self._lock:
            if self._exited:
                return
            self._exited = True
        exit_code = code if isinstance(code, int) else None
        self._post(ContainerExited(exit_code, external, oom, self.container_id))

    # ---- log stream --------------------------------------------------------------------------------

    def _logs(self) -> None:
        try:
            lines = self._docker.logs(self.container_id, since=self._logs_since, follow=True, stop=self._stop)
            for line in lines:
                if self._stop.is_set():
                    return
                self._line(line)
        except DockerError as exc:
            if not self._stop.is_set():
                log.warning("watch.logs_failed", container_id=self.container_id[:12], error=str(exc))

    def _line(self, line: str) -> None:
        with self._lock:
            self.tail.append(line)
            sig = self._analyzer.feed(line)
            marks = self._markers.match(line)
        for name in marks.expected:
            self._post(LogMarker(name, False))
        for name in marks.forbidden:
            self._post(LogMarker(name, True))
        event = self._to_event(sig)
        if event is not None:
            self._post(event)

    def _to_event(self, sig: object) -> Event | None:
        match sig:
            case ShardProgress(pct=pct):
                return LogProgress(float(pct), "shards")
            case Phase(name=name):
                return LogProgress(None, name)
            case KvPool(tokens=tokens, max_concurrency=conc):
                if tokens is not None:
                    self._kv_tokens = tokens
                return LogKvPool(tokens if tokens is not None else self._kv_tokens, conc)
            case Ready():
                return LogReady()
            case StartupFailure(outcome=outcome, detail=detail):
                return LogStartupFailure(outcome, ", ".join(f"{k}={v}" for k, v in sorted(detail.items())))
            case EngineDead(detail=detail):
                return LogEngineDead(detail)
        return None

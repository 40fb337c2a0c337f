"""Watch one container: its Docker events (death within a second) and its log stream (load progress).

Everything here runs on the watcher's own daemon threads and only *posts* events; it never changes
state. The first thing the events thread does is inspect the container (off the loop: a hung Docker
engine only delays this watcher), report when it started (:class:`ContainerInfo`) and, if it is already
dead, its exit. Threads end when the container dies, when a stream ends, or within about a second of
``stop()``. Both are supervised (adapters/threads.py): after a crash the events thread attaches again
(the inspect and the log thread are not repeated; a replayed ``die`` is reported once) and the log
thread goes on from the last line it handled.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import structlog

from supervisor.adapters.docker.adapter import ContainerStatus, DockerAdapter
from supervisor.adapters.docker.stream import ENGINE_BACK, ENGINE_LOST
from supervisor.adapters.threads import Supervised, checkpoint, supervised
from supervisor.core.errors import DockerError, SupervisorError
from supervisor.core.events import (
    AdoptedMarkers,
    ContainerExited,
    ContainerInfo,
    ContainerSignalled,
    DockerLink,
    Event,
    LogEngineDead,
    LogKvPool,
    LogMarker,
    LogProgress,
    LogReady,
    LogStartupFailure,
)
from supervisor.core.vllm.analyzer import LogAnalyzer, MarkerResult, classify, marker_matcher
from supervisor.core.vllm.memory import parse_usage
from supervisor.core.vllm.signals import (
    EngineDead,
    KvPool,
    Phase,
    Ready,
    ShardProgress,
    StartupFailure,
)
from supervisor.daemon.executor.logread import parse_stamped

log = structlog.get_logger("supervisor.watch")

#: How many recent log lines are kept for the failure diagnosis.
TAIL_LINES = 400
#: An adopted container's log is replayed only this far back (a months-old access log is not read again).
ADOPT_LOG_WINDOW_S = 600.0
#: An adopted container's markers are judged on its log since StartedAt, at most this many last lines
#: (the bound of the log archive, daemon/executor/archive.ARCHIVE_TAIL_LINES).
ADOPT_MARKER_LINES = 20_000
#: At the exit the follower reads what is left at once and Docker ends the stream; the exit is posted
#: after it, waiting at most this long (a follower in its reconnect pause wakes at the exit too).
LOG_DRAIN_S = 3.0


class ContainerWatch:
    """The watcher threads of one container (by id) and the log tail they keep."""

    def __init__(
        self,
        docker: DockerAdapter,
        container_id: str,
        post: Callable[[Event], None],
        now: Callable[[], float],
        created_at: float | None,
        expected_markers: tuple[str, ...] = (),
        forbidden_markers: tuple[str, ...] = (),
        on_inspect: Callable[[ContainerStatus], None] | None = None,
        marker_counts: tuple[int, ...] = (),
    ) -> None:
        self.container_id = container_id
        self._on_inspect = on_inspect  # told the first inspect (the live API key is read from it)
        self._docker = docker
        self._post = post
        self._now = now
        self._created_at = created_at
        self._stop = threading.Event()
        self._analyzer = LogAnalyzer()
        self._markers = marker_matcher(list(expected_markers), list(forbidden_markers), marker_counts)
        #: lines at or before this Docker time were judged by the adopted read-back (their markers count once)
        self._marker_cursor: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._kv_tokens: int | None = None
        self._exited = False
        self._hurry = threading.Event()  # set at the exit: the log's last lines are read at once
        self._logs_done = threading.Event()  # set while no log follower runs
        self._logs_done.set()
        self._attached: tuple[float | None] | None = None  # the events' replay start, once inspected
        self._cursor: tuple[int, int] | None = None  # the last log line's Docker time (ns), once seen
        self._thread = Supervised(f"watch-{container_id[:12]}", self._run, self._stop)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the threads to end (they do within about a second)."""
        self._stop.set()
        self._hurry.set()  # a paced follower ends at once too

    def tail_lines(self) -> list[str]:
        """The last log lines seen (for the diagnosis of a failed start); any thread."""
        with self._lock:
            return list(self._tail)

    def settled_tail(self, timeout: float = LOG_DRAIN_S) -> list[str]:
        """The last log lines once the follower has ended (the container exited and its last lines were
        read, or the watch was stopped), waiting at most ``timeout`` s; any thread, never the loop. A failed
        start's diagnosis reads these: what tells the cause can come just after the line that ended the
        start (the real vLLM's access-log 500 a few lines after its engine's death lines: fixture 055)."""
        self._logs_done.wait(timeout)
        return self.tail_lines()

    # ---- inspect, then the two streams ---------------------------------------------------------------

    def _run(self) -> None:
        if self._attached is not None:  # restarted after a crash: attach to the events again
            self._events(self._attached[0])
            return
        status: ContainerStatus | None = None
        try:
            status = self._docker.status(self.container_id)
        except SupervisorError as exc:
            log.warning("watch.inspect_failed", container_id=self.container_id[:12], error=str(exc))
        if self._stop.is_set():
            return
        if status is not None and self._on_inspect is not None:
            self._on_inspect(status)
        started = status.started_at if status is not None else None
        self._post(ContainerInfo(self.container_id, started))
        if status is not None and status.dead:
            # it died before the events stream was attached: report it now (duplicates are ignored)
            self._exit(status.exit_code, None, status.oom_killed)
            return
        if (
            self._created_at is None
            and started is not None
            and (self._markers.expected or self._markers.forbidden)
        ):
            self._adopted_markers(started)
        since = logs_since(self._created_at, started, self._now())
        self._logs_done.clear()
        supervised(f"logs-{self.container_id[:12]}", lambda: self._logs(since), self._stop)
        self._attached = (events_since(self._created_at, started),)
        self._events(self._attached[0])

    def _events(self, since: float | None) -> None:
        signal: str | None = None
        oom = False
        try:
            for ev in self._docker.events(self.container_id, self._stop, since=since):
                checkpoint(f"watch-{self.container_id[:12]}")
                action = ev.get("action")
                if action == "kill":
                    signal = str(ev.get("signal"))
                    self._post(ContainerSignalled(signal, self.container_id))
                elif action in (ENGINE_LOST, ENGINE_BACK):
                    self._post(DockerLink(action == ENGINE_BACK, self.container_id))
                elif action == "oom":
                    oom = True
                elif action == "die":
                    self._exit(ev.get("exit_code"), signal, oom)
                    return
                elif action == "destroy":
                    self._exit(None, signal, oom)
                    return
        except DockerError as exc:
            log.warning("watch.events_failed", container_id=self.container_id[:12], error=str(exc))

    def _exit(self, code: object, signal: str | None, oom: bool) -> None:
        """Post the exit once, after the log's last lines (Docker ends a followed log at the exit): the
        diagnosis of a failed start reads them. Waits at most :data:`LOG_DRAIN_S` for the follower."""
        with self._lock:
            if self._exited:
                return
            self._exited = True
        self._hurry.set()
        if not self._logs_done.wait(LOG_DRAIN_S):
            log.warning("watch.logs_not_drained", container_id=self.container_id[:12], waited_s=LOG_DRAIN_S)
        exit_code = code if isinstance(code, int) else None
        self._post(ContainerExited(exit_code, signal, oom, self.container_id))

    # ---- log stream --------------------------------------------------------------------------------

    def _logs(self, since: float | None) -> None:
        """Follow the log; when the stream breaks (a dockerd restart with live-restore, a hiccup) while the
        container still runs, attach again from the last line's time. Lines carry Docker's timestamps, so a
        line already seen (at or before the cursor) is skipped: no line's effect is lost or repeated."""
        try:
            self._follow(since)
        finally:
            self._logs_done.set()

    def _follow(self, since: float | None) -> None:
        failures = 0
        while not self._stop.is_set() and not self._exited:
            cursor = self._cursor
            start = since if cursor is None else float(cursor[0])  # whole seconds: re-read, then skip
            try:
                stamped = self._docker.logs(
                    self.container_id,
                    since=start,
                    follow=True,
                    stop=self._stop,
                    timestamps=True,
                    hurry=self._hurry,
                )
                for raw in stamped:
                    if self._stop.is_set():
                        return
                    checkpoint(f"logs-{self.container_id[:12]}")
                    at, line = parse_stamped(raw)
                    if at is not None:
                        if cursor is not None and at <= cursor:
                            continue  # seen before the reconnect (or the crash)
                        cursor = at
                    failures = 0
                    self._cursor = cursor  # before the line: one that crashes the thread is not re-read
                    self._line(line, at)
            except DockerError as exc:
                if not self._stop.is_set():
                    log.warning("watch.logs_failed", container_id=self.container_id[:12], error=str(exc))
            if self._stop.is_set() or self._exited or not self._still_running():
                return
            failures += 1
            log.info("watch.logs_reconnect", container_id=self.container_id[:12], attempt=failures)
            self._hurry.wait(min(5.0, 0.5 * 2 ** min(failures, 4)))  # set at the exit or the stop

    def _still_running(self) -> bool:
        """Whether the container still runs (a stream that ended with it needs no reconnect)."""
        try:
            status = self._docker.status(self.container_id)
        except SupervisorError:
            return True  # Docker not answering (restarting): try the stream again
        return status is not None and not status.dead

    def _adopted_markers(self, started: float) -> None:
        """An adopted container: count the markers of its start-up log (since StartedAt, the last
        ADOPT_MARKER_LINES lines) and post what it proves; the live stream then skips those lines' markers."""
        ready = False
        n = 0
        try:
            for raw in self._docker.logs(
                self.container_id, since=started - 1, tail=ADOPT_MARKER_LINES, timestamps=True
            ):
                if self._stop.is_set():
                    return
                at, line = parse_stamped(raw)
                if at is not None:
                    self._marker_cursor = at
                with self._lock:
                    self._markers.feed(line)
                ready = ready or isinstance(classify(line), Ready)
                n += 1
        except DockerError as exc:
            log.warning("watch.adopted_log_failed", container_id=self.container_id[:12], error=str(exc))
            return
        with self._lock:
            missing = tuple(t.text() for t in self._markers.tally() if not t.proved)
            forbidden = self._markers.forbidden_seen
        self._post(AdoptedMarkers(self.container_id, missing, forbidden, ready, n))

    def _line(self, line: str, at: tuple[int, int] | None = None) -> None:
        judged = at is not None and self._marker_cursor is not None and at <= self._marker_cursor
        with self._lock:
            self._tail.append(line)
            sig = self._analyzer.feed(line)
            marks = MarkerResult((), ()) if judged else self._markers.feed(line)
            usage = parse_usage(line)
            # the GiB figures come before the pool line ("Model loading took", "Available KV cache memory")
            gib = None
            if isinstance(sig, KvPool):
                gib = (self._gib("available_kv_gib"), self._gib("model_load_gib"))
        for name in marks.expected:
            self._post(LogMarker(name, False))
        for name in marks.forbidden:
            self._post(LogMarker(name, True))
        event = self._to_event(sig, gib)
        if event is not None:
            self._post(event)
        if usage is not None:  # "Actual usage ..." (after the pool line): the memory breakdown
            self._post(LogKvPool(None, None, usage=usage))

    def _gib(self, key: str) -> float | None:
        value = self._analyzer.fact(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def _to_event(self, sig: object, gib: tuple[float | None, float | None] | None = None) -> Event | None:
        match sig:
            case ShardProgress(pct=pct):
                return LogProgress(float(pct), "shards")
            case Phase(name=name):
                return LogProgress(None, name)
            case KvPool(tokens=tokens, max_concurrency=conc):
                if tokens is not None:
                    self._kv_tokens = tokens
                kv_gib, model_gib = gib or (None, None)
                return LogKvPool(tokens if tokens is not None else self._kv_tokens, conc, kv_gib, model_gib)
            case Ready():
                return LogReady()
            case StartupFailure(outcome=outcome, detail=detail):
                return LogStartupFailure(outcome, ", ".join(f"{k}={v}" for k, v in sorted(detail.items())))
            case EngineDead(detail=detail):
                return LogEngineDead(detail)
        return None


def events_since(created: float | None, started: float | None) -> float | None:
    """Replay Docker events from just before the container was created (or started, when adopted)."""
    ref = created if created is not None else started
    return ref - 1 if ref is not None else None


def logs_since(created: float | None, started: float | None, now: float) -> float | None:
    """Our own container: its whole log. An adopted one: at most the last ``ADOPT_LOG_WINDOW_S``.

    A container adopted mid-load started recently, so its whole load log is still inside the window
    (progress and the ready line are seen); one serving for weeks is judged by probes, not by old lines.
    """
    if created is not None or started is None:
        return None
    return max(started - 1, now - ADOPT_LOG_WINDOW_S)

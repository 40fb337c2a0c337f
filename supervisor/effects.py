"""Execute the machine's actions: the only place where decisions turn into I/O.

Blocking work (Docker calls, HTTP probes, page-cache drops) runs on a small bounded thread pool and
answers by posting an event; nothing here changes a profile's state. Fast bookkeeping (history
events, the start ledger, the load slot) runs inline on the main loop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import structlog

from supervisor.adapters import host, probes
from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.adapters.store import Store
from supervisor.config import DaemonConfig
from supervisor.core import actions as A
from supervisor.core.clock import Clock
from supervisor.core.errors import (
    ContainerMissing,
    EngineUnreachable,
    SupervisorError,
)
from supervisor.core.events import (
    AuthResult,
    ContainerExited,
    ContainerStarted,
    ContainerStartFailed,
    ContainerStopped,
    DrainProgress,
    Event,
    FirstGeneration,
    HealthResult,
    PreflightDone,
    ProbeRound,
    SlotAcquired,
)
from supervisor.core.machine.ops import UNWANTED
from supervisor.core.promtext import VllmMetrics
from supervisor.core.spec import ContainerSpec
from supervisor.journal import AlertSink, Journal
from supervisor.runtime import ProfileRuntime
from supervisor.watchers import ContainerWatch

log = structlog.get_logger("supervisor.effects")

#: Label put on every container the daemon creates.
MANAGED_LABEL = "vllm-supervisor.profile"

Post = Callable[[str, Event], None]
ReplyFn = Callable[[bool, str], None]


class SlotManager:
    """One model load at a time on this host: in-process holder plus a host-wide flock."""

    def __init__(self, lock: host.LoadLock) -> None:
        self._lock = lock
        self.holder: str | None = None

    def try_acquire(self, name: str) -> bool:
        if self.holder == name:
            return True
        if self.holder is not None:
            return False
        if not self._lock.try_acquire():
            return False
        self.holder = name
        return True

    def release(self, name: str) -> None:
        if self.holder == name:
            self.holder = None
            self._lock.release()


class Effects:
    """Runs actions for the daemon loop."""

    def __init__(
        self,
        config: DaemonConfig,
        docker: DockerAdapter,
        store: Store,
        clock: Clock,
        post: Post,
        alert_sink: AlertSink | None = None,
    ) -> None:
        self._config = config
        self._docker = docker
        self._clock = clock
        self._post = post
        self.journal = Journal(store, clock, alert_sink)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="effect")
        self.slots = SlotManager(host.LoadLock(config.host.load_lock_path))
        self._lock = threading.Lock()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- dispatch ---------------------------------------------------------------------------------

    def run(self, rt: ProfileRuntime, action: A.Action, reply: ReplyFn | None) -> None:
        """Execute one action for ``rt`` (inline if fast, else on the pool)."""
        match action:
            case A.Emit(name=name, fields=fields):
                self.journal.emit(rt.name, name, fields)
            case A.Alert():
                self.journal.alert(rt, action)
            case A.RecordStart():
                self.journal.record_start(rt, action)
            case A.Reply(ok=ok, message=message):
                if reply is not None:
                    reply(ok, message)
            case A.AcquireSlot():
                self.try_slot(rt)
            case A.ReleaseSlot():
                rt.waiting_for_slot = False
                self.slots.release(rt.name)
            case A.WatchContainer(container_id=cid):
                self.watch(rt, cid)
            case A.RunPreflight():
                self._submit(rt, "preflight", self._preflight, rt)
            case A.CreateAndStart():
                self._submit(rt, "create", self._create_and_start, rt)
            case A.StopContainer(grace_s=grace, reason=reason, container_id=cid):
                # an unwanted (stray) container's stop must not wait behind, nor stand for, our own;
                # nor may it make a later `docker stop` of ours look expected (a crash instead of a stop)
                if reason != UNWANTED:
                    rt.stopping.set()
                kind = f"stop-unwanted-{cid}" if reason == UNWANTED else "stop"
                self._submit(rt, kind, self._stop, rt, grace, reason, cid)
            case A.ProbeHealth():
                self._submit(rt, "health", self._health, rt)
            case A.RunProbeRound(generation=gen):
                self._submit(rt, "round", self._round, rt, gen)
            case A.RunFirstGeneration():
                self._submit(rt, "first", self._first_generation, rt)
            case A.CheckAuth():
                self._submit(rt, "auth", self._auth, rt)
            case A.PollDrain():
                self._submit(rt, "drain", self._drain, rt)

    def try_slot(self, rt: ProfileRuntime) -> None:
        """Take the load slot if free (else retried on every tick while ``waiting_for_slot``)."""
        if self.slots.try_acquire(rt.name):
            rt.waiting_for_slot = False
            self._post(rt.name, SlotAcquired())
        else:
            rt.waiting_for_slot = True

    def _submit(self, rt: ProfileRuntime, kind: str, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if kind in rt.in_flight:
                return  # the same kind of work is already running: its answer will come
            rt.in_flight.add(kind)

        def job() -> None:
            try:
                fn(*args)
            except Exception as exc:
                log.exception("effect.crashed", profile=rt.name, kind=kind, error=str(exc))
            finally:
                with self._lock:
                    rt.in_flight.discard(kind)

        try:
            self._pool.submit(job)
        except RuntimeError:  # pool shut down: the daemon is exiting
            with self._lock:
                rt.in_flight.discard(kind)

    def emit(self, profile: str, name: str, fields: dict[str, object]) -> None:
        """Record a history event (also used by the daemon itself)."""
        self.journal.emit(profile, name, fields)

    # ---- container --------------------------------------------------------------------------------

    def watch(self, rt: ProfileRuntime, container_id: str) -> None:
        """Start the watchers of ``container_id`` (replacing those of an older container). Main loop only."""
        if rt.watch is not None and rt.watch.container_id == container_id:
            return
        if rt.watch is not None:
            rt.watch.stop()
        try:
            info = self._docker.inspect(container_id)
        except SupervisorError as exc:
            log.warning("watch.inspect_failed", profile=rt.name, error=str(exc))
            info = {}
        started = _parse_docker_time(str((info.get("State") or {}).get("StartedAt") or ""))
        rt.container_started_at = started
        watch = ContainerWatch(
            self._docker,
            container_id,
            lambda ev: self._post(rt.name, ev),
            rt.stopping.is_set,
            since=_events_since(rt.container_created_at, started),
            logs_since=_logs_since(rt.container_created_at, started, self._clock.now()),
            expected_markers=rt.profile.markers.expected,
            forbidden_markers=rt.profile.markers.forbidden,
        )
        rt.watch = watch
        watch.start()
        state = info.get("State") or {}
        if info and not state.get("Running", False) and state.get("Status") in ("exited", "dead"):
            # it died before the events stream was attached: report it now (duplicates are ignored)
            self._post(
                rt.name,
                ContainerExited(state.get("ExitCode"), False, bool(state.get("OOMKilled")), container_id),
            )

    def _preflight(self, rt: ProfileRuntime) -> None:
        hcfg = self._config.host
        missing = missing_bind_sources(rt.profile.container)
        if missing:
            # Docker would silently create an empty directory and vLLM would fail minutes later
            detail = "bind mount source does not exist: " + ", ".join(missing)
            self._post(rt.name, PreflightDone(False, detail, None))
            return
        notes: list[str] = []
        if hcfg.drop_caches:
            dropped = host.drop_caches(hcfg.drop_caches_level)
            notes.append("page cache dropped" if dropped else "page cache not dropped (not permitted)")
        mem: float | None = None
        ok = True
        if hcfg.min_mem_available_gib > 0:
            ok, mem = host.wait_for_memory(
                hcfg.min_mem_available_gib, hcfg.settle_timeout_s, self._clock, 1.0
            )
            notes.append(
                f"MemAvailable {mem:.1f} GiB"
                + ("" if ok else f" < {hcfg.min_mem_available_gib} GiB after wait")
            )
        else:
            try:
                mem = host.mem_available_gib()
            except (OSError, ValueError):
                mem = None
        leaks = host.leaked_shm()
        if leaks:
            notes.append(
                f"{len(leaks)} leaked /dev/shm segments ({sum(s for _, s in leaks) / 2**20:.0f} MiB)"
            )
        self._post(rt.name, PreflightDone(ok, "; ".join(notes), mem))

    def _create_and_start(self, rt: ProfileRuntime) -> None:
        profile = rt.profile
        name = profile.container.name
        rt.stopping.clear()
        try:
            if profile.api_key is not None:
                profile.api_key.ensure_file()
            spec = profile.container_spec()
            if self._docker.find(name) is not None:
                self._docker.remove(name, force=True)
            created = self._clock.now()
            cid = self._docker.create(spec, {MANAGED_LABEL: profile.name})
            self._docker.start(cid)
        except EngineUnreachable as exc:
            self._post(rt.name, ContainerStartFailed(str(exc), transient=True))
            return
        except SupervisorError as exc:
            self._post(rt.name, ContainerStartFailed(str(exc)))
            return
        rt.container_created_at = created
        self._post(rt.name, ContainerStarted(cid))  # the machine answers with WatchContainer(cid)

    def _stop(self, rt: ProfileRuntime, grace: float, reason: str, container_id: str | None) -> None:
        """Stop; answer ContainerStopped only when the container is known to be down.

        A stop Docker refused or did not answer (engine down, timeout) proves nothing: no answer, so the
        machine stays STOPPING and re-issues the stop when it is overdue, instead of reporting STOPPED
        while the container may still run. A stray container's stop never answers for ours.
        """
        ref = container_id or rt.state.container_id or rt.profile.container.name
        if reason == UNWANTED:
            try:
                self._docker.stop(ref, grace)
            except SupervisorError as exc:  # gone already, or Docker silent: nothing to tell the machine
                log.warning("container.unwanted_stop_failed", profile=rt.name, error=str(exc))
            return
        try:
            self._docker.stop(ref, grace)
        except ContainerMissing:
            self._post(rt.name, ContainerExited(None, False, False, container_id or rt.state.container_id))
        except SupervisorError as exc:
            log.error("container.stop_failed", profile=rt.name, reason=reason, error=str(exc))
            return
        self._post(rt.name, ContainerStopped())

    # ---- probes -----------------------------------------------------------------------------------

    def _key(self, rt: ProfileRuntime) -> str | None:
        src = rt.profile.api_key
        return src.resolve(rt.profile.container) if src is not None else None

    def _health(self, rt: ProfileRuntime) -> None:
        p = rt.profile
        r = probes.check_health(p.base_url, min(p.probes.timeout_s, 10.0), p.probes.health_path)
        self._post(rt.name, HealthResult(r.ok, r.status, r.latency_ms, r.error))

    def _round(self, rt: ProfileRuntime, generation: bool) -> None:
        p = rt.profile
        h = probes.check_health(p.base_url, p.probes.timeout_s, p.probes.health_path)
        running = waiting = tokens = None
        if p.probes.metrics:
            mres, text = probes.fetch_metrics(p.base_url, p.probes.timeout_s)
            if mres.ok:
                m = VllmMetrics.from_text(text)
                running, waiting, tokens = m.requests_running, m.requests_waiting, m.generation_tokens_total
        gen_ok: bool | None = None
        gen_ms: float | None = None
        gen_err: str | None = None
        if generation and p.probes.generation:
            g = self._generate(rt)
            gen_ok, gen_ms, gen_err = g.ok, g.latency_ms, g.error
            if p.probes.metrics and not g.ok:
                # re-read the counter: tokens that moved during our wait prove the engine is alive
                mres, text = probes.fetch_metrics(p.base_url, p.probes.timeout_s)
                if mres.ok:
                    m = VllmMetrics.from_text(text)
                    running, waiting, tokens = (
                        m.requests_running,
                        m.requests_waiting,
                        m.generation_tokens_total,
                    )
        self._post(
            rt.name,
            ProbeRound(h.ok, h.status, gen_ok, gen_ms, gen_err, running, waiting, tokens),
        )

    def _generate(self, rt: ProfileRuntime) -> probes.ProbeResult:
        p = rt.profile
        model = p.served_model_name or p.container.name
        return probes.generate(
            p.base_url,
            self._key(rt),
            model,
            kind=p.probes.generation_kind,
            prompt=p.probes.prompt,
            max_tokens=p.probes.max_tokens,
            timeout=p.probes.timeout_s,
        )

    def _first_generation(self, rt: ProfileRuntime) -> None:
        g = self._generate(rt)
        self._post(rt.name, FirstGeneration(g.ok, g.latency_ms, g.error))

    def _auth(self, rt: ProfileRuntime) -> None:
        r = probes.check_auth(rt.profile.base_url, min(rt.profile.probes.timeout_s, 10.0))
        self._post(rt.name, AuthResult(r.status))

    def _drain(self, rt: ProfileRuntime) -> None:
        mres, text = probes.fetch_metrics(rt.profile.base_url, min(rt.profile.probes.timeout_s, 10.0))
        running = VllmMetrics.from_text(text).requests_running if mres.ok else None
        self._post(rt.name, DrainProgress(running))


def missing_bind_sources(spec: ContainerSpec) -> list[str]:
    """Host paths of bind mounts that do not exist (weights, patched files): a start would be wasted."""
    return [m.source for m in spec.mounts if m.type == "bind" and not os.path.exists(m.source)]


def _events_since(created: float | None, started: float | None) -> float | None:
    """Replay Docker events from just before the container was created (or started, when adopted)."""
    ref = created if created is not None else started
    return ref - 1 if ref is not None else None


#: An adopted container's log is replayed only this far back (a months-old access log is not read again).
ADOPT_LOG_WINDOW_S = 600.0


def _logs_since(created: float | None, started: float | None, now: float) -> float | None:
    """Our own container: its whole log. An adopted one: at most the last ``ADOPT_LOG_WINDOW_S``.

    A container adopted mid-load started recently, so its whole load log is still inside the window
    (progress and the ready line are seen); one serving for weeks is judged by probes, not by old lines.
    """
    if created is not None or started is None:
        return None
    return max(started - 1, now - ADOPT_LOG_WINDOW_S)


def _parse_docker_time(text: str) -> float | None:
    """Docker's RFC 3339 nanosecond timestamps -> epoch seconds (None for the zero time)."""
    if not text or text.startswith("0001-"):
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    digits = "".join(ch for ch in frac if ch.isdigit())[:6]
    return base + (int(digits) / 10 ** len(digits) if digits else 0.0)

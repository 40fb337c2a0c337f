"""The daemon: one writer over an event queue.

Watchers, the pool's probes, the control socket and the tick all *post* ``(profile, event)``; only
:meth:`Daemon.run`'s loop calls the pure :func:`~supervisor.core.machine.builder`, stores the new
snapshot and hands the actions to :class:`~supervisor.effects.Effects`. On SIGTERM the loop ends
WITHOUT stopping the model containers: the next daemon adopts them.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from apscheduler.triggers.cron import CronTrigger

from supervisor import __version__
from supervisor.adapters import host
from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.adapters.heartbeat import Heartbeat
from supervisor.adapters.notify import Notifier
from supervisor.adapters.store import Store
from supervisor.adapters.systemd import SystemdNotifier
from supervisor.config import DaemonConfig
from supervisor.control import ControlServer
from supervisor.core import events as E
from supervisor.core.clock import Clock
from supervisor.core.errors import HostError, StateError, SupervisorError
from supervisor.core.machine import Policy, step
from supervisor.core.memguard import MemoryGuard
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_STATES, DRAIN_STATES, SERVING_STATES, State
from supervisor.effects import Effects
from supervisor.policy import policy_for
from supervisor.runtime import ProfileRuntime

log = structlog.get_logger("supervisor.daemon")

TICK_S = 1.0
#: How long an operator command waits for the loop to answer.
COMMAND_TIMEOUT_S = 10.0
#: Unchanged-but-volatile snapshots (probe times) are persisted at most this often.
PERSIST_EVERY_S = 30.0
#: States whose container the memory guard stops when nothing is loading.
_GUARDED_SERVING = SERVING_STATES | DRAIN_STATES
_COMMANDS: dict[str, Callable[[], E.Event]] = {
    "start": E.StartRequested,
    "stop": E.StopRequested,
    "restart": E.RestartRequested,
    "reset": E.ResetRequested,
    "maintenance": E.MaintenanceRequested,
}


@dataclass
class _ReplyBox:
    done: threading.Event
    ok: bool = False
    message: str = ""

    def set(self, ok: bool, message: str) -> None:
        self.ok, self.message = ok, message
        self.done.set()


@dataclass(frozen=True)
class _Envelope:
    profile: str
    event: E.Event
    reply: _ReplyBox | None = None


class Daemon:
    """Supervises every profile of one daemon config."""

    def __init__(
        self,
        config: DaemonConfig,
        clock: Clock,
        docker: DockerAdapter | None = None,
        notifier: SystemdNotifier | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.docker = docker or DockerAdapter()
        self.notifier = notifier or SystemdNotifier.from_env()
        self.store = Store(config.state_dir, clock)
        self._queue: queue.Queue[_Envelope | None] = queue.Queue()
        self._stop = threading.Event()
        self._started_mono = clock.monotonic()
        self.alerts = Notifier(config.alerts.channels, config.alerts.dedupe_s, clock)
        self.heartbeat = Heartbeat(config.heartbeat, clock)
        self._heartbeat_thread: threading.Thread | None = None
        self.effects = Effects(config, self.docker, self.store, clock, self.post, self.alerts.alert)
        self.runtimes: dict[str, ProfileRuntime] = {}
        self._status_lock = threading.Lock()
        self._status: dict[str, Any] = {"daemon": {}, "profiles": []}
        self._cron = CronTrigger.from_crontab(config.maintenance.cron) if config.maintenance.enabled else None
        self._next_maintenance: float | None = None
        self._unobserved: list[str] = []
        mg = config.host.memory_guard
        self._memguard: MemoryGuard | None = (
            MemoryGuard(mg.mem_available_min_gib, mg.samples, mg.memfree_min_gib, mg.memavailable_below_gib)
            if mg.enabled
            else None
        )
        self._docker_warned_at = -1e9
        self.control = ControlServer(
            config.socket_path, self.handle_control, config.socket_mode, config.socket_group
        )

    # ---- public -----------------------------------------------------------------------------------

    def post(self, profile: str, event: E.Event) -> None:
        """Queue an event for a profile (any thread)."""
        self._queue.put(_Envelope(profile, event))

    def request_stop(self) -> None:
        """Ask the loop to end (signal handlers call this; it only sets a flag and wakes the loop)."""
        self._stop.set()
        self._queue.put(None)

    def status(self) -> dict[str, Any]:
        """The last published status (DESIGN.md shape); cheap, never waits for the loop."""
        with self._status_lock:
            return self._status

    def run(self) -> int:
        """Run until :meth:`request_stop`; returns the process exit code."""
        # the socket first: a second daemon on the same config is refused before it touches any state
        self.control.start()
        try:
            self._load_profiles()
            self._observe_all()
            self._publish()
            self.notifier.ready(self._status_line())
            log.info("daemon.started", pid=os.getpid(), version=__version__, profiles=list(self.runtimes))
            self._loop()
        finally:
            self.notifier.stopping()
            self.control.stop()
            for rt in self.runtimes.values():
                if rt.watch is not None:
                    rt.watch.stop()
                self._persist(rt, force=True)
                self.effects.slots.release(rt.name)
            self.effects.shutdown()
            self.alerts.close(10)
            log.info("daemon.stopped", containers_left_running=True)
        return 0

    # ---- start-up ---------------------------------------------------------------------------------

    def _load_profiles(self) -> None:
        now = self.clock.now()
        boot = host.boot_id()
        boot_file = self.config.state_dir / "boot_id"
        try:
            previous = boot_file.read_text(encoding="utf-8").strip()
        except OSError:
            previous = None
        boot_changed = previous is not None and previous != boot
        try:
            boot_file.write_text(boot + "\n", encoding="utf-8")
        except OSError as exc:
            log.error("store.write_failed", what="boot_id", error=str(exc))
        for profile in self.config.profiles:
            policy = policy_for(profile, self.config)
            state = self._restore_state(profile.name, now, policy, profile.autostart)
            rt = ProfileRuntime(profile, policy, state)
            rt.median_kv_tokens = self.store.median_kv_tokens(profile.name)
            self.runtimes[profile.name] = rt
            self._dispatch(_Envelope(profile.name, E.DaemonStarted(boot_changed)))

    def _restore_state(self, name: str, now: float, policy: Policy, autostart: bool) -> ProfileState:
        """The persisted snapshot (or a fresh one) with the operator's intent applied."""
        limit, window = policy.breaker_limit, policy.breaker_window_s
        try:
            data = self.store.load_profile_state(name)
            state = (
                ProfileState.from_dict(data)
                if data is not None
                else ProfileState.initial(name, now, limit, window)
            )
        except StateError as exc:
            # a corrupt state file: start clean, but never lose the operator's stop
            log.error("state.corrupt", profile=name, error=str(exc))
            self.effects.emit(name, "state.corrupt", {"error": str(exc)})
            state = ProfileState.initial(name, now, limit, window)
        try:
            intent = self.store.load_intent(name)
        except StateError as exc:
            log.error("state.intent_unreadable", profile=name, error=str(exc))
            intent = "stop"  # unreadable intent: do not start anything on our own
        if intent is None and not autostart:
            intent = "stop"  # never started by an operator and not to be started on our own
        if intent in ("run", "stop"):
            state = dataclasses.replace(state, intent=intent)
        return state

    def _observe_all(self) -> None:
        """Inspect every profile's container once; those Docker could not answer for are retried each tick."""
        self._unobserved = [rt.name for rt in self.runtimes.values() if not self._observe(rt)]

    def _observe(self, rt: ProfileRuntime) -> bool:
        """Tell the machine what the profile's container looks like; False if Docker did not answer.

        Without an answer nothing is decided: a Docker engine that is down must not look like "no
        container" (that would start a second one) nor count against the circuit breaker.
        """
        try:
            info = self.docker.find(rt.profile.container.name)
        except SupervisorError as exc:
            now = self.clock.monotonic()
            if now - self._docker_warned_at >= 60:
                self._docker_warned_at = now
                log.error("docker.unreachable", profile=rt.name, error=str(exc))
                self.effects.emit(rt.name, "docker.unreachable", {"error": str(exc)})
            return False
        if info is None:
            self._dispatch(_Envelope(rt.name, E.ContainerObserved(None, False, None)))
            return True
        st = info.get("State") or {}
        self._dispatch(
            _Envelope(
                rt.name,
                E.ContainerObserved(str(info.get("Id")), bool(st.get("Running")), st.get("ExitCode")),
            )
        )
        return True

    # ---- loop -------------------------------------------------------------------------------------

    def _loop(self) -> None:
        next_tick = self.clock.monotonic()
        watchdog = self.notifier.watchdog_interval_s()
        next_watchdog = self.clock.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_tick - self.clock.monotonic())
            try:
                env = self._queue.get(timeout=timeout)
            except queue.Empty:
                env = None
            if env is not None:
                self._dispatch(env)
            mono = self.clock.monotonic()
            if mono >= next_tick:
                next_tick = mono + TICK_S
                self._tick()
            if watchdog is not None and mono >= next_watchdog:
                self.notifier.watchdog()
                next_watchdog = mono + watchdog / 3

    def _tick(self) -> None:
        now = self.clock.now()
        self._maybe_maintenance(now)
        if self._unobserved:
            self._unobserved = [n for n in self._unobserved if not self._observe(self.runtimes[n])]
        for rt in self.runtimes.values():
            if rt.waiting_for_slot:
                self.effects.try_slot(rt)
            self._dispatch(_Envelope(rt.name, E.Tick()))
        self._publish()
        self._maybe_heartbeat()
        self._sample_memory()

    def _sample_memory(self) -> None:
        """One memory-guard sample per tick; when it trips, stop what is loading (else what is serving)."""
        if self._memguard is None:
            return
        try:
            info = host.read_meminfo()
        except HostError as exc:
            log.warning("memory.unreadable", error=str(exc))
            return
        gib = 1024.0**3
        self._memguard, why = self._memguard.observe(
            info.get("MemAvailable", 0) / gib, info.get("MemFree", 0) / gib
        )
        if why is None:
            return
        loading = [rt for rt in self.runtimes.values() if rt.state.state == State.STARTING]
        serving = [rt for rt in self.runtimes.values() if rt.state.state in _GUARDED_SERVING]
        targets = loading or serving
        log.error("memory.guard_tripped", detail=why, targets=[rt.name for rt in targets])
        for rt in targets:
            self._dispatch(_Envelope(rt.name, E.MemoryPressure(why)))

    def _maybe_heartbeat(self) -> None:
        """Ping the dead-man URL when due, off the loop (an external service alerts when pings stop)."""
        busy = self._heartbeat_thread is not None and self._heartbeat_thread.is_alive()
        if busy or not self.heartbeat.due():
            return
        summary = f"vllm-supervisor {__version__} pid {os.getpid()}: {self._status_line()}"
        self._heartbeat_thread = threading.Thread(
            target=self.heartbeat.beat, args=(summary,), name="heartbeat", daemon=True
        )
        self._heartbeat_thread.start()

    def _maybe_maintenance(self, now: float) -> None:
        if self._cron is None:
            return
        if self._next_maintenance is None:
            self._next_maintenance = self._next_fire(now)
            return
        if now >= self._next_maintenance:
            self._next_maintenance = self._next_fire(now + 1)
            for rt in self.runtimes.values():
                if rt.state.state in (State.RUNNING, State.DEGRADED):
                    self._dispatch(_Envelope(rt.name, E.MaintenanceRequested()))

    def _next_fire(self, now: float) -> float | None:
        assert self._cron is not None
        current = datetime.fromtimestamp(now).astimezone()
        fire = self._cron.get_next_fire_time(None, current)
        return fire.timestamp() if fire is not None else None

    def _dispatch(self, env: _Envelope) -> None:
        rt = self.runtimes.get(env.profile)
        if rt is None:
            return
        old = rt.state
        reply = env.reply.set if env.reply is not None else None
        try:
            new, actions = step(old, env.event, self.clock.now(), rt.policy)
        except Exception as exc:
            log.exception("machine.crashed", profile=rt.name, event=type(env.event).__name__, error=str(exc))
            if reply is not None:
                reply(False, f"internal error: {exc}")
            return
        rt.state = new
        if new.state != old.state:
            self.notifier.status(self._status_line())
        self._persist(rt)
        for action in actions:
            try:
                self.effects.run(rt, action, reply)
            except SupervisorError as exc:  # an adapter refused: report it, keep supervising
                log.error("effect.failed", profile=rt.name, action=type(action).__name__, error=str(exc))
                self.effects.emit(
                    rt.name, "effect.failed", {"action": type(action).__name__, "error": str(exc)}
                )
        if env.reply is not None and not env.reply.done.is_set():
            env.reply.set(True, f"{rt.name}: {new.state.value}")
        if env.reply is not None or new.state != old.state:
            self._publish()

    def _persist(self, rt: ProfileRuntime, force: bool = False) -> None:
        s = rt.state
        durable = (
            s.state,
            s.intent,
            s.container_id,
            s.breaker,
            s.backoff,
            s.restarts,
            s.pending,
            s.emergencies,
        )
        now = self.clock.monotonic()
        if not force and durable == rt.last_persisted and now - rt.last_persist_at < PERSIST_EVERY_S:
            return
        try:
            if rt.last_persisted is None or durable[1] != rt.last_persisted[1] or force:
                self.store.save_intent(rt.name, s.intent)
            self.store.save_profile_state(rt.name, s.to_dict())
            rt.last_persisted = durable
            rt.last_persist_at = now
        except StateError as exc:
            log.error("state.write_failed", profile=rt.name, error=str(exc))

    # ---- status and control -----------------------------------------------------------------------

    def _status_line(self) -> str:
        return ", ".join(f"{rt.name}: {rt.state.state.value}" for rt in self.runtimes.values())

    def _publish(self) -> None:
        now = self.clock.now()
        profiles = []
        for rt in self.runtimes.values():
            d = rt.state.status_dict(now)
            d["container"] = rt.profile.container.name
            d["kv_pool"]["median_tokens"] = rt.median_kv_tokens
            up = rt.state.state in CONTAINER_STATES
            d["uptime_s"] = (
                round(now - rt.container_started_at, 1)
                if up and rt.container_started_at is not None
                else None
            )
            d["next_maintenance"] = (
                datetime.fromtimestamp(self._next_maintenance).astimezone().isoformat(timespec="seconds")
                if self._next_maintenance is not None
                else None
            )
            d["base_url"] = rt.profile.base_url
            profiles.append(d)
        status = {
            "daemon": {
                "pid": os.getpid(),
                "version": __version__,
                "uptime_s": round(self.clock.monotonic() - self._started_mono, 1),
                "config": str(self.config.path),
            },
            "profiles": profiles,
        }
        with self._status_lock:
            self._status = status

    def handle_control(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one control request (runs on the control server's threads)."""
        cmd = str(request.get("cmd") or "")
        args = request.get("args") or {}
        name = args.get("name")
        if name is not None and name not in self.runtimes:
            known = ", ".join(sorted(self.runtimes)) or "none"
            return {"ok": False, "error": f"no profile named {name!r} (known: {known})"}
        if cmd == "status":
            status = self.status()
            if name is not None:
                status = {**status, "profiles": [p for p in status["profiles"] if p["name"] == name]}
            return {"ok": True, "data": status}
        if cmd == "events":
            n = int(args.get("n") or 50)
            return {"ok": True, "data": {"events": self.store.read_events(name, n)}}
        if cmd == "history":
            n = int(args.get("n") or 50)
            return {"ok": True, "data": {"starts": self.store.read_starts(name, n)}}
        factory = _COMMANDS.get(cmd)
        if factory is None:
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        if name is None:
            return {"ok": False, "error": f"{cmd} needs a profile name"}
        box = _ReplyBox(threading.Event())
        self._queue.put(_Envelope(name, factory(), box))
        if not box.done.wait(COMMAND_TIMEOUT_S):
            return {"ok": False, "error": f"the daemon did not answer {cmd} within {COMMAND_TIMEOUT_S:.0f} s"}
        if box.ok:
            return {"ok": True, "data": {"message": box.message}}
        return {"ok": False, "error": box.message}

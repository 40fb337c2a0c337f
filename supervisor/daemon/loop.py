"""The daemon loop: one writer over one event queue. Watchers, pool jobs, the Docker pinger, the control
socket and the tick only *post* to the :class:`~supervisor.daemon.inbox.Inbox`; only this loop calls the
pure :func:`~supervisor.core.machine.step`, keeps the new snapshot, persists it and hands the actions to
:class:`~supervisor.daemon.executor.effects.Effects`. Nothing here waits on Docker, HTTP or the kernel log. On
SIGTERM the loop ends WITHOUT stopping the model containers: the next daemon adopts them.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from supervisor import __version__
from supervisor.adapters.alerts.sender import AlertSender
from supervisor.adapters.control.server import ControlServer
from supervisor.adapters.host import system as host
from supervisor.adapters.host.memalloc import HeapTrim
from supervisor.adapters.host.systemd import SystemdNotifier
from supervisor.adapters.kernel_log.follower import KernelLogEvent
from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.adapters.store.state import Store
from supervisor.config import DaemonConfig, Profile
from supervisor.core import actions as A, events as E
from supervisor.core.clock import Clock
from supervisor.core.errors import HostError, SupervisorError
from supervisor.core.fleet.rules import DockerHealth, reload_plan
from supervisor.core.machine import Policy, step
from supervisor.core.maintenance.duty import MaintenanceDuty, MaintenanceOrders, resume
from supervisor.core.maintenance.plan import CatchUp
from supervisor.core.profile_state import ProfileState
from supervisor.daemon import reload
from supervisor.daemon.duties import docker_watch, hostguard, sentinel
from supervisor.daemon.duties.alert_health import AlertHealth
from supervisor.daemon.duties.companions import CompanionChecks
from supervisor.daemon.duties.digest import DigestDuty
from supervisor.daemon.duties.flight import FlightDuty
from supervisor.daemon.duties.heartbeat import HeartbeatDuty
from supervisor.daemon.duties.lifecycle import Lifecycle
from supervisor.daemon.duties.maintenance import MaintenanceClock
from supervisor.daemon.duties.seats import SeatKeeper
from supervisor.daemon.executor.effects import Effects
from supervisor.daemon.inbox import (
    CompanionChecked,
    DaemonEvent,
    DockerPing,
    Envelope,
    Inbox,
    RecordOnly,
    ReloadRequest,
    ReplyBox,
)
from supervisor.daemon.persist import SnapshotWriter, new_autostart, restore_state
from supervisor.daemon.sources.docker_ping import DockerPinger
from supervisor.daemon.sources.host_memory import HostMemory
from supervisor.daemon.sources.kernel_log import KernelWatch
from supervisor.daemon.status import StatusBoard, status_document

log = structlog.get_logger("supervisor.daemon")

TICK_S = 1.0


@dataclass
class _Profile:
    """The loop's view of one profile: its config, its policy and its current snapshot."""

    profile: Profile
    policy: Policy
    state: ProfileState

    @property
    def name(self) -> str:
        return self.profile.name


@dataclass
class Parts:
    """The collaborators the composition root hands the loop."""

    store: Store
    effects: Effects
    inbox: Inbox
    systemd: SystemdNotifier
    alerts: AlertSender
    alert_health: AlertHealth
    heartbeat: HeartbeatDuty
    pinger: DockerPinger
    control: ControlServer
    maintenance: MaintenanceClock
    board: StatusBoard
    kernel: KernelWatch
    hostmem: HostMemory
    companions: CompanionChecks
    lifecycle: Lifecycle  # the alive record; daemon.started / stopped / crashed
    digest: DigestDuty
    policy_for: Callable[[Profile, DaemonConfig], Policy]
    perf: sentinel.SentinelDuty  # the performance canary: its answers, its restarts (docs/sentinel.md)
    metrics: MetricsServer | None = None  # the Prometheus endpoint (config ``metrics:``)
    flight: FlightDuty | None = None  # the flight recorder (docs/wedge.md)
    heap: HeapTrim = field(default_factory=HeapTrim)  # free heap pages back to the kernel (memalloc.py)


class Daemon:
    """Supervises every profile of one daemon config."""

    def __init__(self, config: DaemonConfig, clock: Clock, parts: Parts, policies: dict[str, Policy]) -> None:
        self.config = config
        self.clock = clock
        self.parts = parts
        self.store = parts.store
        self._snapshots = SnapshotWriter(parts.store, clock.monotonic)
        self._policies = policies
        self._stop = threading.Event()
        self._started_mono = clock.monotonic()
        self.profiles: dict[str, _Profile] = {}
        self.removed: dict[str, str] = {}  # profiles a reload removed -> their containers (left running)
        self.docker_health = DockerHealth()
        self.maintenance = MaintenanceDuty()
        self.seats = SeatKeeper(config.profiles, lambda: self.profiles, parts.effects, parts.inbox.post)

    # ---- public -----------------------------------------------------------------------------------

    def post(self, profile: str, event: E.Event) -> None:
        """Queue an event for a profile (any thread)."""
        self.parts.inbox.post(profile, event)

    def request_stop(self) -> None:
        """Ask the loop to end (signal handlers call this; it only sets a flag and wakes the loop)."""
        self._stop.set()
        self.parts.inbox.wake()

    def request_reload(self) -> None:
        """Ask the loop to re-read the config (SIGHUP calls this; it only posts)."""
        self.parts.inbox.post_daemon(ReloadRequest())

    def status(self) -> dict[str, Any]:
        """The last published status document; cheap, never waits for the loop."""
        return self.parts.board.read()

    def names(self) -> list[str]:
        return [p.name for p in self.config.profiles]

    def run(self) -> int:
        """Run until :meth:`request_stop`; returns the process exit code."""
        parts = self.parts
        # the socket first: a second daemon on the same config is refused before it touches any state
        parts.control.start()
        error: BaseException | None = None
        try:
            self._publish()  # status answers at once, before the profiles' files are read
            self._boot()
            self._publish()
            if parts.metrics is not None:
                parts.metrics.start_retrying()  # after the first publish: it seeds the persisted counts
            parts.systemd.ready(self._status_line())
            parts.pinger.start()
            parts.kernel.start()
            if parts.flight is not None:
                parts.flight.start()  # after _boot: the morning-after story read the previous run's records
            log.info("daemon.started", pid=os.getpid(), version=__version__, profiles=self.names())
            self._loop()
        except BaseException as exc:
            error = exc
            raise
        finally:  # first: daemon.stopped is queued while the rest shuts down; alerts.close delivers it
            parts.lifecycle.end(self._states(), self._uptime(), error)
            parts.systemd.stopping()
            parts.pinger.stop()
            parts.kernel.stop()
            if parts.flight is not None:
                parts.flight.stop()
            parts.control.stop()
            if parts.metrics is not None:
                parts.metrics.stop()
            for prof in self.profiles.values():
                self._snapshots.write(prof.state, force=True)
            parts.effects.shutdown()
            parts.alerts.close(10)
            log.info("daemon.stopped", containers_left_running=True)
        return 0

    # ---- start-up (local files only: Docker is asked by the pool) -----------------------------------

    def _boot(self) -> None:
        now = self.clock.now()
        boot: str | None = None
        try:
            boot = host.boot_id()
            boot_changed = self.store.swap_boot_id(boot)
        except HostError as exc:
            log.error("host.boot_id_unreadable", error=str(exc))
            boot_changed = False
        self.parts.lifecycle.begin(boot)  # a crash of the previous run is reported here
        self.parts.digest.start(now)
        for profile in self.config.profiles:
            self._add(profile, self._policies[profile.name], now, boot_changed)
        clock = self.parts.maintenance
        plan, duty = clock.start(now)
        self.maintenance, orders = resume(duty, now, self.config.maintenance.catch_up_s, clock.describe)
        self._carry_out(orders)
        self._maintain(plan)

    def _add(self, profile: Profile, policy: Policy, now: float, boot_changed: bool) -> None:
        if new_autostart(self.store, profile):  # (before the first snapshot writes its intent)
            self.seats.claim(profile.name)  # autostart: its seat-mates make way
        state = restore_state(self.store, self.parts.effects.records, profile, now, policy)
        self.profiles[profile.name] = _Profile(profile, policy, state)
        wedged_at = self.parts.lifecycle.wedged_at() if boot_changed else None
        self._dispatch(Envelope(profile.name, E.DaemonStarted(boot_changed, wedged_at)))

    def _reload(self, reply: ReplyBox | None) -> None:
        """Re-read the config: start the added, drift-check the changed, leave the removed running."""
        records = self.parts.effects.records
        new, problems = reload.read_config(self.config)
        if new is None:
            reload.refused(records, problems, reply)
            return
        old = {p.name: p for p in self.config.profiles}
        fresh = {p.name: p for p in new.profiles}
        plan = reload_plan(old, fresh)
        later = reload.daemon_keys_changed(self.config, new)
        self.config = dataclasses.replace(self.config, profiles=new.profiles)
        self.seats.configure(new.profiles)
        for name in plan.removed:
            del self.profiles[name]
            self.parts.effects.forget(name)
            self.removed[name] = old[name].container.name
            records.emit(name, "config.profile_removed", {"container": old[name].container.name})
        for name in (*plan.added, *plan.changed):
            profile, policy = fresh[name], self.parts.policy_for(fresh[name], self.config)
            self.parts.effects.set_profile(profile)
            if name in plan.changed:
                prof = self.profiles[name]
                prof.profile, prof.policy = profile, policy
                self._dispatch(Envelope(name, E.ConfigReloaded()))
            else:
                self.removed.pop(name, None)
                self._add(profile, policy, self.clock.now(), boot_changed=False)
        reload.announce(records, plan, later, reply)
        self._publish()

    # ---- loop -------------------------------------------------------------------------------------

    def _loop(self) -> None:
        systemd = self.parts.systemd
        next_tick = self.clock.monotonic()
        watchdog = systemd.watchdog_interval_s()
        next_watchdog = self.clock.monotonic()
        while not self._stop.is_set():
            env = self.parts.inbox.get(max(0.0, next_tick - self.clock.monotonic()))
            if env is not None:
                self._dispatch(env)
            mono = self.clock.monotonic()
            if mono >= next_tick:
                next_tick = mono + TICK_S
                self._tick()
            if watchdog is not None and mono >= next_watchdog:
                systemd.watchdog()
                next_watchdog = mono + watchdog / 3

    def _tick(self) -> None:
        self._maintain(self.parts.maintenance.poll(self.clock.now()))
        self.parts.companions.tick(self.clock.now())
        for name in self.profiles:
            self._dispatch(Envelope(name, E.Tick()))
        self.seats.tick()  # held preflights whose seat is free now
        self._carry_out(self.parts.perf.tick(self.clock.now(), self._states(), self.config.profiles))
        self._publish()
        now, states = self.clock.now(), self._states()
        self.parts.heartbeat.tick(states, now, self._status_line())
        self.parts.lifecycle.settle(states)
        self.parts.digest.tick(now, states, self.parts.maintenance.status()["next_local"], self._uptime())
        self._sample_memory()
        if self.parts.flight is not None:
            self.parts.flight.tick(self._states())
        self.parts.heap.tick(self.clock.monotonic())

    def _sample_memory(self) -> None:
        """The kernel follower's news (mode changes, saved position); host memory when due (hostguard.py)."""
        for name, fields in self.parts.kernel.poll(self.clock.monotonic()):
            self.parts.effects.records.emit("", name, fields)
        hostguard.sample_memory(self.clock.monotonic(), self.parts.hostmem, self._states(), self._dispatch)
        hostguard.contiguity(self.parts.hostmem, self.parts.effects.records)

    def _maintain(self, plan: CatchUp) -> None:
        """One maintenance step: the core decides from the schedule's verdict and every profile's state."""
        clock, now = self.parts.maintenance, self.clock.now()
        self.maintenance, orders = self.maintenance.step(now, self._states(), plan, clock.describe)
        self._carry_out(orders)
        clock.keep(self.maintenance)

    def _carry_out(self, orders: MaintenanceOrders) -> None:
        """Record the maintenance events and alerts, then dispatch the maintenance requests."""
        for profile, action in orders.records:
            if profile in self.profiles:
                self.parts.effects.run(profile, action, None)
            elif isinstance(action, A.Emit):
                self.parts.effects.records.emit(profile, action.name, action.fields)
        for name in orders.requests:
            self._dispatch(Envelope(name, E.MaintenanceRequested()))

    # ---- dispatch ---------------------------------------------------------------------------------

    def _dispatch(self, env: Envelope) -> None:
        if env.profile is None:
            if isinstance(env.event, DockerPing):
                self._docker_ping(env.event)
            elif isinstance(env.event, KernelLogEvent):
                self._kernel_event(env.event)
            elif isinstance(env.event, RecordOnly):  # the kernel log's losses, a crashed thread
                self.parts.effects.records.emit("", *env.event.record())
            elif isinstance(env.event, CompanionChecked):
                self.parts.companions.apply(env.event, self.clock.now())
            elif isinstance(env.event, ReloadRequest):
                self._reload(env.reply)
            return
        prof = self.profiles.get(env.profile)
        if prof is None or isinstance(env.event, DaemonEvent):
            return
        old = prof.state
        reply = env.reply.set if env.reply is not None else None
        try:
            new, actions = step(old, env.event, self.clock.now(), prof.policy)
        except Exception as exc:
            log.exception(
                "machine.crashed", profile=prof.name, event=type(env.event).__name__, error=str(exc)
            )
            if reply is not None:
                reply(False, f"internal error: {exc}")
            return
        prof.state = new
        if new.state != old.state:
            self.parts.systemd.status(self._status_line())
        self._snapshots.write(new)
        for action in actions:
            if self.seats.hold(prof.name, action):
                continue  # a seat-mate is still up
            try:
                self.parts.effects.run(prof.name, action, reply)
            except SupervisorError as exc:  # an adapter refused: report it, keep supervising
                log.error("effect.failed", profile=prof.name, action=type(action).__name__, error=str(exc))
                self.parts.effects.records.emit(
                    prof.name, "effect.failed", {"action": type(action).__name__, "error": str(exc)}
                )
        self.seats.after_step(prof.name, env.event, new)  # a claim: its seat-mates get a handover
        if env.reply is not None and not env.reply.done.is_set():
            env.reply.set(True, f"{prof.name}: {new.state.value}")
        if env.reply is not None or new.state != old.state:
            self._publish()
        if new.state != old.state and new.retry_due(self.clock.now()):  # a run that served ended: now
            self._dispatch(Envelope(prof.name, E.Tick()))

    def _docker_ping(self, ping: DockerPing) -> None:
        now, records = self.clock.now(), self.parts.effects.records
        self.docker_health, flipped = docker_watch.on_ping(self.docker_health, ping, now, records)
        if flipped:
            self._publish()

    def _kernel_event(self, ev: KernelLogEvent) -> None:
        """One classified kernel message: in the history, then to every profile
        (daemon/duties/hostguard.py)."""
        mem = self.parts.hostmem.status().get("mem_available_gib")  # the kill rule's headroom
        hostguard.kernel_event(ev, self._states(), self.parts.effects.records, self._dispatch, mem)

    def _states(self) -> dict[str, ProfileState]:
        return {n: p.state for n, p in self.profiles.items()}

    def _uptime(self) -> float:
        return self.clock.monotonic() - self._started_mono

    def _status_line(self) -> str:
        return ", ".join(f"{n}: {p.state.state.value}" for n, p in self.profiles.items())

    def _publish(self) -> None:
        doc = status_document(
            self.config,
            self._states(),
            now=self.clock.now(),
            uptime_s=self._uptime(),
            docker=self.docker_health,
            maintenance=self.parts.maintenance.status(),
            slot_holder=self.parts.effects.slots.holder,
            host=self.parts.hostmem.status(),
            kernel_log=self.parts.kernel.status(),
            companions=self.parts.companions.status(),
            removed=self.removed,
            seats=self.seats.status(),
            alerts=self.parts.alert_health.status(),
            sentinel=self.parts.perf.status(),
        )
        self.parts.board.publish(doc)

"""The daemon loop: one writer over one event queue. Take an event, step the machine it belongs to (a
profile's, core/machine/, or the fleet's, core/fleet/step.py), persist the snapshot, run the actions, publish.
Threads, pool jobs, the control socket and the tick only *post* to the inbox; nothing here waits on Docker,
HTTP or the kernel log. On SIGTERM the loop ends WITHOUT stopping the model containers (the next adopts them).
"""

from __future__ import annotations

import threading
from typing import Any

import structlog

from supervisor.config import DaemonConfig, Profile
from supervisor.core import events as E
from supervisor.core.clock import Clock
from supervisor.core.fleet.actions import Dispatch, FleetAction, Run
from supervisor.core.fleet.events import FLEET_EVENTS, ChannelReported, Claimed, FleetEvent, Stepped, Tick
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step as fleet_step
from supervisor.core.machine import Policy, step
from supervisor.daemon import persist, reload
from supervisor.daemon.inbox import DaemonEvent, Envelope, ReloadRequest, ReplyBox, ReplyFn
from supervisor.daemon.parts import Parts

log = structlog.get_logger("supervisor.daemon")

TICK_S = 1.0


class Daemon:
    """Supervises every profile of one daemon config."""

    def __init__(self, config: DaemonConfig, clock: Clock, parts: Parts) -> None:
        self.config, self.clock, self.parts, self.store = config, clock, parts, parts.store
        self._snapshots = persist.SnapshotWriter(parts.store, clock.monotonic)
        self._stop, self._started_mono = threading.Event(), clock.monotonic()
        self.profiles: dict[str, persist.Supervised] = {}
        self.removed: dict[str, str] = {}  # profiles a reload removed -> their containers (left running)
        self.fleet, self.fleet_policy = FleetState(), parts.policies.fleet(config)  # read back at boot
        self._fleet_writer = persist.FleetWriter(parts.store)

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
        self._publish()  # on the board before the socket answers: every profile READING, never none
        self.parts.sources.open()  # the socket first: a second daemon on the same config is refused here
        error: BaseException | None = None
        try:
            self._boot()
            self._publish()
            self.parts.start(self._status_line(), self.names())
            self._loop()
        except BaseException as exc:
            error = exc
            raise
        finally:
            for prof in self.profiles.values():
                self._snapshots.write(prof.state, force=True)
            self.parts.close(self._states(), self._uptime(), error)
            while (env := self.parts.inbox.get(0)) is not None:  # the channels' last reports (history)
                if isinstance(env.event, ChannelReported):
                    self._fleet(env.event)
            log.info("daemon.stopped", containers_left_running=True)
        return 0

    def _boot(self) -> None:  # local files only: Docker is asked by the pool
        now, keepers = self.clock.now(), self.parts.jobs.keepers
        boot, changed = persist.boot_changed(self.store)
        keepers.lifecycle.begin(boot)  # a crash of the previous run is reported here
        self.fleet = self._fleet_writer.restore(self.parts.effects.records)
        for profile in self.config.profiles:
            self._add(profile, self.parts.policies.profile(profile, self.config), now, changed)

    def _add(self, profile: Profile, policy: Policy, now: float, boot_changed: bool) -> None:
        if persist.new_autostart(self.store, profile):  # (before the first snapshot writes its intent)
            self._fleet(Claimed(profile.name))  # autostart: its seat-mates make way
        state = persist.restore_state(self.store, self.parts.effects.records, profile, now, policy)
        self.profiles[profile.name] = persist.Supervised(profile, policy, state)
        wedged_at = self.parts.jobs.keepers.lifecycle.wedged_at() if boot_changed else None
        self._dispatch(Envelope(profile.name, E.DaemonStarted(boot_changed, wedged_at)))

    def _reload(self, reply: ReplyBox | None) -> None:
        """Re-read the config: start the added, drift-check the changed, leave the removed running."""
        if (done := reload.apply(self.config, self.profiles, self.removed, self.parts, reply)) is None:
            return  # refused: nothing changed
        self.config, self.fleet_policy, added, changed, announce = done
        for env in changed:
            self._dispatch(env)
        for profile in added:
            self._add(profile, self.parts.policies.profile(profile, self.config), self.clock.now(), False)
        announce()
        self._publish()

    def _loop(self) -> None:
        systemd, mono = self.parts.systemd, self.clock.monotonic
        next_tick = next_watchdog = mono()
        watchdog = systemd.watchdog_interval_s()
        while not self._stop.is_set():
            env = self.parts.inbox.get(max(0.0, next_tick - mono()))
            if env is not None:  # no exception ends supervision: the guard records it and goes on
                self.parts.effects.guard.run("dispatch", self._dispatch, env, reply=env.reply)
            if mono() >= next_tick:
                next_tick = mono() + TICK_S
                self.parts.effects.guard.run("tick", self._tick)
            if watchdog is not None and mono() >= next_watchdog:
                systemd.watchdog()
                next_watchdog = mono() + watchdog / 3

    def _tick(self) -> None:
        for name in self.profiles:
            self._dispatch(Envelope(name, E.Tick()))
        self._publish()
        self._fleet(Tick())
        self.parts.sources.upkeep(self.clock.monotonic())  # the kernel follower's news: to the inbox

    def _dispatch(self, env: Envelope) -> None:
        if env.profile is None and isinstance(env.event, ReloadRequest):
            return self._reload(env.reply)
        if env.profile is None and isinstance(env.event, FLEET_EVENTS):
            return self._fleet(env.event)
        prof = self.profiles.get(env.profile or "")
        if prof is None or isinstance(env.event, DaemonEvent):
            return
        old, reply = prof.state, env.reply.set if env.reply is not None else None
        try:
            new, actions = step(old, env.event, self.clock.now(), prof.policy)
        except Exception as exc:
            log.exception(
                "machine.crashed", profile=prof.name, event=type(env.event).__name__, error=str(exc)
            )
            return reply(False, f"internal error: {exc}") if reply is not None else None
        prof.state = new
        if new.state != old.state:
            self.parts.systemd.status(self._status_line())
        self._snapshots.write(new)
        self._fleet(Stepped(prof.name, env.event, tuple(actions)), reply)  # the seats may hold some
        if env.reply is not None and not env.reply.done.is_set():
            env.reply.set(True, f"{prof.name}: {new.state.value}")
        if env.reply is not None or new.state != old.state:
            self._publish()
        if new.state != old.state and new.retry_due(self.clock.now()):  # a run that served ended: now
            self._dispatch(Envelope(prof.name, E.Tick()))

    def _fleet(self, event: FleetEvent, reply: ReplyFn | None = None) -> None:
        """One daemon-wide event: the fleet step decides; persist; dispatch to the profiles, run the rest."""
        old = self.fleet
        try:
            new, actions = fleet_step(old, event, self.clock.now(), self._states(), self.fleet_policy)
        except Exception as exc:  # the fleet step never takes the daemon down (nor a profile's actions)
            log.exception("fleet.crashed", event=type(event).__name__, error=str(exc))
            ran = [Run(event.profile, a) for a in event.actions] if isinstance(event, Stepped) else []
            new, actions = old, list[FleetAction](ran)
        self.fleet = new
        self._fleet_writer.write(new)
        self._act(actions, reply)
        if new.docker != old.docker:  # a flip, or one more failed ping (status: daemon.docker)
            self._publish()

    def _act(self, actions: list[FleetAction], reply: ReplyFn | None = None) -> None:
        for action in actions:
            if isinstance(action, Dispatch):
                self._dispatch(Envelope(action.profile, action.event))
            elif isinstance(action, Run):  # a profile's own action (the reply: its operator command's)
                self.parts.effects.perform(action.profile, action.action, reply)
            else:
                self.parts.jobs.run(action)

    def _states(self) -> persist.States:
        return {n: p.state for n, p in self.profiles.items()}

    def _uptime(self) -> float:
        return self.clock.monotonic() - self._started_mono

    def _status_line(self) -> str:
        return ", ".join(f"{n}: {p.state.state.value}" for n, p in self.profiles.items())

    def _publish(self) -> None:
        p, now, up = self.parts, self.clock.now(), self._uptime()
        p.board.refresh(self.config, self._states(), self.fleet, self.fleet_policy, now, up, p.jobs.keepers,
                        p.sources, self.removed)  # fmt: skip

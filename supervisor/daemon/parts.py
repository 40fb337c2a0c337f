"""What the composition root (build.py) hands the loop: eight collaborators, each a room of the daemon."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from supervisor.adapters.host.systemd import SystemdNotifier
from supervisor.adapters.store.state import Store
from supervisor.config import DaemonConfig, Profile
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.machine import Policy
from supervisor.daemon.executor.effects import Effects
from supervisor.daemon.executor.fleet_jobs import FleetJobs
from supervisor.daemon.inbox import Inbox
from supervisor.daemon.persist import States
from supervisor.daemon.sources.threads import Sources
from supervisor.daemon.status import StatusBoard

log = structlog.get_logger("supervisor.daemon")


@dataclass(frozen=True)
class Policies:
    """The machine's Policy of a profile and the fleet step's policy of a config (again after a reload)."""

    profile: Callable[[Profile, DaemonConfig], Policy]
    fleet: Callable[[DaemonConfig], FleetPolicy]


@dataclass
class Parts:
    """The loop's collaborators."""

    store: Store
    inbox: Inbox  # the one event queue
    board: StatusBoard  # the last published status document
    effects: Effects  # runs the profiles' actions
    jobs: FleetJobs  # runs the fleet's actions; holds the daemon-wide writers (alive, flight, heartbeat)
    sources: Sources  # the threads that post to the inbox, the control socket, the metrics endpoint
    systemd: SystemdNotifier
    policies: Policies

    def start(self, status_line: str, names: list[str]) -> None:
        """After the boot: systemd hears READY, the threads start, the flight recorder too (the morning-after
        story has read the previous run's records by now)."""
        self.systemd.ready(status_line)
        self.sources.start()
        self.jobs.keepers.flight.start()
        log.info("daemon.started", pid=os.getpid(), profiles=names)

    def close(self, states: States, uptime_s: float, error: BaseException | None) -> None:
        """At the end of the loop: ``daemon.stopped`` is queued first, the rest shuts down, then the alert
        sender delivers what is queued within its bounded wait. The model containers are left running."""
        self.jobs.keepers.lifecycle.end(states, uptime_s, error)
        self.systemd.stopping()
        self.sources.stop()
        self.jobs.keepers.flight.stop()
        self.effects.shutdown()
        self.jobs.keepers.alerts.close(10)

"""The fleet step's actions that are I/O: records and alerts written through
:class:`~supervisor.daemon.executor.records.Records`, log lines, the pool jobs (a companion's GET, whose
answer comes back to the inbox as a fleet event; the daily digest), the heartbeat's ping (a thread of its
own), the flight recorder's queue and the ``daemon.started`` message. ``Dispatch`` is the loop's (it steps
a profile's machine).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from supervisor import __version__
from supervisor.adapters.alerts.heartbeat import Heartbeat
from supervisor.adapters.alerts.sender import AlertSender
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host import system as host
from supervisor.adapters.store.state import Store
from supervisor.adapters.vllm import probes
from supervisor.config import Profile
from supervisor.core.errors import HostError, StateError
from supervisor.core.events import Event
from supervisor.core.fleet.actions import (
    Announce,
    AppendPerf,
    Beat,
    CheckCompanion,
    Dispatch,
    FleetAction,
    FlightSample,
    Log,
    Post,
    Raise,
    Record,
    Run,
    RunCanary,
    SaveMaintenance,
    SendDigest,
)
from supervisor.core.fleet.digest import digest_alert
from supervisor.core.fleet.events import CompanionChecked, FleetEvent
from supervisor.core.fleet.heartbeat import HeartbeatVerdict
from supervisor.core.fleet.policy import Companion
from supervisor.core.profile_state import ProfileState
from supervisor.daemon.executor.canary import canary_round
from supervisor.daemon.executor.flight import FlightDuty
from supervisor.daemon.executor.lifecycle import Lifecycle
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.fleet")

#: Runs ``fn(*args)`` on the executor's pool, one job of ``kind`` at a time (``Effects.background``).
Background = Callable[..., None]
PostDaemon = Callable[[FleetEvent], None]
#: Newest ledger rows per profile the digest looks through for the last 24 h.
LEDGER_ROWS = 500


def check(companion: Companion, post: PostDaemon) -> None:
    """The pool job: one GET of a companion (no redirects followed), its answer posted to the loop."""
    c = companion
    r = probes.check_url(c.url, c.timeout_s, c.expect_status, redirects=False)
    post(CompanionChecked(c.profile, c.name, r.ok, r.status, r.error))


def send_digest(
    store: Store,
    records: Records,
    states: Mapping[str, ProfileState],
    now: float,
    next_maintenance: str | None,
    uptime_s: float,
) -> None:
    """The pool job: read the ledgers and MemAvailable, send the daily digest (core/fleet/digest.py)."""
    ledger, perf = {}, {}
    for name in states:
        try:
            ledger[name] = store.read_starts(name, n=LEDGER_ROWS)
            perf[name] = store.read_perf(name, n=LEDGER_ROWS)  # the sentinel's canaries (docs/sentinel.md)
        except StateError as exc:
            log.error("store.read_failed", what="ledger", error=str(exc))
            ledger.setdefault(name, [])
    try:
        mem: float | None = host.mem_available_gib()
    except (HostError, OSError, ValueError):
        mem = None
    alert = digest_alert(
        states,
        ledger,
        now,
        mem_available_gib=mem,
        next_maintenance=next_maintenance,
        uptime_s=uptime_s,
        perf=perf,
    )
    records.daemon_alert(alert)


@dataclass
class Keepers:
    """The daemon-wide I/O the fleet's actions drive: the heartbeat's pinger, the flight recorder, the
    alive record, the store (the digest's ledgers), and what the digest tells besides the states."""

    heartbeat: Heartbeat
    flight: FlightDuty
    lifecycle: Lifecycle
    store: Store
    docker: DockerAdapter
    #: A profile's config and its one live API key (the executor's), None for a profile it no longer has.
    live: Callable[[str], tuple[Profile, Callable[[], str | None]] | None]
    now: Callable[[], float]
    alerts: AlertSender  # closed last, after daemon.stopped was queued
    post_profile: Callable[[str, Event], None]  # the inbox's post (a handover)


class FleetJobs:
    """Runs the fleet step's I/O actions (on the loop: inline bookkeeping, or a pool job, or a thread)."""

    def __init__(
        self, records: Records, background: Background, post: PostDaemon, keepers: Keepers | None = None
    ) -> None:
        """``keepers`` None: only records, alerts, logs and companion checks (what a test of those needs)."""
        self.records = records
        self._background = background
        self._post = post
        self._keepers = keepers
        self._beat: threading.Thread | None = None

    @property
    def keepers(self) -> Keepers:
        if self._keepers is None:
            raise RuntimeError("FleetJobs made without its keepers")
        return self._keepers

    def run(self, action: FleetAction) -> None:
        match action:
            case Record(profile=profile, name=name, fields=fields):
                self.records.emit(profile, name, fields)
            case Raise(profile=profile, alert=alert, container=container):
                live = self._keepers.live(profile) if self._keepers is not None and not container else None
                self.records.alert(profile, live[0].container.name if live else container, alert, None)
            case Log(level=level, name=name, fields=fields):
                getattr(log, level)(name, **fields)
            case CheckCompanion(companion=c):
                self._background(f"companion-{c.key}", check, c, self._post)
            case Beat(failing=failing, reasons=reasons, status_line=line):
                self._heartbeat(HeartbeatVerdict(failing, reasons), line)
            case SendDigest(profiles=profiles, now=now, uptime_s=up, next_maintenance=nxt):
                k = self.keepers
                self._background("digest", send_digest, k.store, self.records, profiles, now, nxt, up)
            case SaveMaintenance(last_evaluated=last, duty=duty):
                try:  # the next write may succeed; a daemon restart may then miss a fire
                    self.keepers.store.save_maintenance({"last_evaluated": last, "duty": duty})
                except StateError as exc:
                    log.error("maintenance.state_write_failed", error=str(exc))
            case Announce(profiles=profiles, waited_s=waited):
                self.keepers.lifecycle.announce(profiles, waited)
            case Post(profile=profile, event=event):
                self.keepers.post_profile(profile, event)
            case FlightSample(states=states):
                self.keepers.flight.sample(states)
            case RunCanary(profile=name, container_id=cid, first=first, fingerprint=fp):
                k, live = self.keepers, self.keepers.live(name)
                if live is not None:
                    args = (live[0], cid, first, fp, live[1], k.store, k.docker, self._post, k.now)
                    self._background(f"sentinel-{name}", canary_round, *args)
            case AppendPerf(row=row):
                try:
                    self.keepers.store.append_perf(row)
                except StateError as exc:
                    log.error("store.write_failed", what="perf", error=str(exc))
            case Dispatch() | Run():
                raise TypeError(f"{type(action).__name__} is the loop's: it steps or runs a profile's")

    def _heartbeat(self, verdict: HeartbeatVerdict, line: str) -> None:
        """Ping when the heartbeat's pacing says one is due (at once on a flip), on a thread of its own."""
        hb = self.keepers.heartbeat
        busy = self._beat is not None and self._beat.is_alive()
        if busy or not hb.enabled or not hb.due(failing=verdict.failing):
            return
        body = verdict.body(f"vllm-supervisor {__version__} pid {os.getpid()}", line)
        self._beat = threading.Thread(
            target=hb.beat, args=(body, verdict.failing), name="heartbeat", daemon=True
        )
        self._beat.start()

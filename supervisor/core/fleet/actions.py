"""What the fleet step asks for, as data: the loop dispatches events to profiles' machines, records and
alerts, and hands the rest to the executor's fleet jobs (supervisor/daemon/executor/fleet_jobs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from supervisor.core.actions import Action, Alert
from supervisor.core.events import Event
from supervisor.core.fleet.policy import Companion
from supervisor.core.profile_state import ProfileState


@dataclass(frozen=True)
class Dispatch:
    """Step ``profile``'s machine with ``event`` (a kernel report, memory pressure, the hard floor...)."""

    profile: str
    event: Event


@dataclass(frozen=True)
class Run:
    """Run one of ``profile``'s own actions now (the seats let it through)."""

    profile: str
    action: Action


@dataclass(frozen=True)
class Post:
    """Queue ``event`` for ``profile`` in the inbox (a handover: after the current step, like any event)."""

    profile: str
    event: Event


@dataclass(frozen=True)
class Record:
    """One history event (``profile`` "": daemon-wide)."""

    profile: str
    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Raise:
    """Record and send an alert (``profile`` "": daemon-wide; ``container``: the row it names)."""

    profile: str
    alert: Alert
    container: str = ""


@dataclass(frozen=True)
class Log:
    """A log line only (not a history event): ``level`` is ``info``, ``warning`` or ``error``."""

    level: str
    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckCompanion:
    """One HTTP GET of a companion on the pool (its answer comes back as ``CompanionChecked``)."""

    companion: Companion


@dataclass(frozen=True)
class Beat:
    """The heartbeat's verdict this tick: the executor pings when its pacing says a ping is due (at once
    when the verdict flips), to the failure URL when ``failing``, on a thread of its own."""

    failing: bool
    reasons: tuple[str, ...] = ()
    status_line: str = ""  # "a: RUNNING, b: STOPPED"


@dataclass(frozen=True)
class SendDigest:
    """Compose and send the daily digest (a pool job reads the ledgers and MemAvailable)."""

    profiles: Mapping[str, ProfileState]
    now: float
    uptime_s: float
    next_maintenance: str | None = None  # "Sun 2026-12-06 04:00 CET"


@dataclass(frozen=True)
class Announce:
    """Every profile's container was looked at (or the settle timeout passed): ``daemon.started``."""

    profiles: Mapping[str, ProfileState]
    waited_s: float


@dataclass(frozen=True)
class FlightSample:
    """One flight-recorder record of the profiles' states (the recorder's thread adds the host sample)."""

    states: Mapping[str, str]


@dataclass(frozen=True)
class RunCanary:
    """One performance-sentinel round on the pool (its answer comes back as ``CanaryMeasured``); ``first``:
    the run's first, which reads the perf ledger's history of ``fingerprint`` and the start's log too."""

    profile: str
    container_id: str
    first: bool
    fingerprint: str | None


@dataclass(frozen=True)
class AppendPerf:
    """One row of the perf ledger (``perf.jsonl``)."""

    row: dict[str, Any]


@dataclass(frozen=True)
class SaveMaintenance:
    """Write ``maintenance.json``: the last evaluation of the schedule and the round (``duty``) together."""

    last_evaluated: float | None
    duty: dict[str, Any]


FleetAction = (
    Dispatch
    | Run
    | Post
    | Record
    | Raise
    | Log
    | CheckCompanion
    | Beat
    | SendDigest
    | Announce
    | FlightSample
    | RunCanary
    | AppendPerf
    | SaveMaintenance
)

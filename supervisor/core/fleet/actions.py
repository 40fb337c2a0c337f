"""What the fleet step asks for, as data: the loop dispatches events to profiles' machines, records and
alerts, and hands the rest to the executor's fleet jobs (supervisor/daemon/executor/fleet_jobs.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from supervisor.core.actions import Alert
from supervisor.core.events import Event
from supervisor.core.fleet.policy import Companion


@dataclass(frozen=True)
class Dispatch:
    """Step ``profile``'s machine with ``event`` (a kernel report, memory pressure, the hard floor...)."""

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


FleetAction = Dispatch | Record | Raise | Log | CheckCompanion

"""What the fleet step hears (daemon-wide, not for one profile): every source thread posts one of these to the
one inbox, and only the loop hands them to :func:`supervisor.core.fleet.step.step`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from supervisor.core.actions import Action
from supervisor.core.alerts.channels import Delivery
from supervisor.core.events import Event
from supervisor.core.host.attribution import PidLookup
from supervisor.core.host.contiguity import Contiguity
from supervisor.core.sentinel.judge import Sample


@dataclass(frozen=True)
class Tick:
    """Once a second (the loop's tick): what is due by the clock (companion checks)."""


@dataclass(frozen=True)
class DockerPinged:
    """The Docker engine answered a ping (``ok``) or did not (``error``)."""

    ok: bool
    error: str | None = None


@dataclass(frozen=True)
class MemorySampled:
    """One host memory sample (GiB; PSI in percent, None: the kernel has no memory PSI)."""

    mem_available_gib: float
    mem_free_gib: float
    swap_used_gib: float = 0.0
    swap_total_gib: float = 0.0
    psi_some_avg10: float | None = None
    psi_full_avg10: float | None = None
    psi_some_avg60: float | None = None


@dataclass(frozen=True)
class DiskSampled:
    """The free space (GiB) on the state directory's file system (sampled with host memory)."""

    free_gib: float


@dataclass(frozen=True)
class ContiguitySampled:
    """Free contiguous memory now, from /proc/buddyinfo (sampled with host memory; docs/wedge.md)."""

    contiguity: Contiguity


@dataclass(frozen=True)
class KernelLine:
    """One classified kernel message as the follower read it: its kind, one-line summary, the history
    event's fields, and what is needed to tell whose process it names (core/host/attribution.py)."""

    kind: str
    summary: str
    line: str
    ts: float
    fields: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    vllm_name: bool | None = None  # the line's process name is a vLLM one (None: it names none)
    lookup: PidLookup | None = None
    backlog: bool = False  # read before the follower caught up: recorded, never judged (docs/wedge.md)


@dataclass(frozen=True)
class CompanionChecked:
    """A companion check answered (the pool job :func:`supervisor.daemon.executor.fleet_jobs.check`)."""

    profile: str
    name: str
    ok: bool
    status: int | None
    error: str | None = None


@dataclass(frozen=True)
class Noted:
    """A daemon-wide fact that is only recorded (the kernel log's losses, a supervised thread's crash)."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChannelReported:
    """One message's fate on one alert channel (the sender's report, from the channel's thread)."""

    delivery: Delivery


@dataclass(frozen=True)
class CanaryMeasured:
    """One performance-sentinel round of ``profile``'s container ``container_id`` (the pool job
    :func:`supervisor.daemon.executor.canary.canary_round`).

    ``busy``: the server had running or waiting requests (or /metrics did not answer): nothing sent.
    ``sample`` None and not busy: the canary failed (``error``). On a run's first round (``loaded``):
    ``history``, the per-start decode figures of earlier starts of this fingerprint, ``earlier_backends``
    the backends the newest of them logged, ``backends`` what this start logged, ``last_restart`` when the
    perf ledger says the sentinel last restarted the profile (its restart rate limit survives a daemon
    restart).
    """

    profile: str
    container_id: str
    busy: bool = False
    sample: Sample | None = None
    error: str | None = None
    loaded: bool = False
    history: tuple[float, ...] = ()
    earlier_backends: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    last_restart: float | None = None


@dataclass(frozen=True)
class Stepped:
    """A profile's machine stepped on ``event`` and asks for ``actions`` (its new snapshot is already among
    the profiles): the seats decide which run now."""

    profile: str
    event: Event
    actions: tuple[Action, ...]


@dataclass(frozen=True)
class Claimed:
    """``profile`` is being started on purpose (an autostart new to this state directory): its seat-mates
    that want to run make way."""

    profile: str


FleetEvent = (
    Tick
    | DockerPinged
    | MemorySampled
    | DiskSampled
    | ContiguitySampled
    | KernelLine
    | CompanionChecked
    | Noted
    | ChannelReported
    | CanaryMeasured
    | Stepped
    | Claimed
)
#: The event classes, for an isinstance check.
FLEET_EVENTS = (
    Tick,
    DockerPinged,
    MemorySampled,
    DiskSampled,
    ContiguitySampled,
    KernelLine,
    CompanionChecked,
    Noted,
    ChannelReported,
    CanaryMeasured,
    Stepped,
    Claimed,
)

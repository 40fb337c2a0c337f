"""Inputs of the state machine: frozen values posted by the daemon loop and its watchers.

Events carry no timestamps; the loop reads the clock once and passes ``now`` to ``machine.step``.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.host_events import (  # members of Event
    HardFloor,
    HostAfterStop,
    KernelReport,
    ReserveMeasured,
    ShmSwept,
)
from supervisor.core.loadtime import (
    LoadActivity as LoadActivity,  # members of Event (re-exported)
    LoadHistory as LoadHistory,
)
from supervisor.core.log_events import (  # members of Event (re-exported)
    AdoptedMarkers as AdoptedMarkers,
    LogEngineDead as LogEngineDead,
    LogKvPool as LogKvPool,
    LogMarker as LogMarker,
    LogProgress as LogProgress,
    LogReady as LogReady,
    LogStartupFailure as LogStartupFailure,
)
from supervisor.core.operator_events import (  # members of Event (re-exported)
    OPERATOR_EVENTS as OPERATOR_EVENTS,
    MaintenanceRequested as MaintenanceRequested,
    ResetRequested as ResetRequested,
    RestartRequested as RestartRequested,
    StartRequested as StartRequested,
    StopRequested as StopRequested,
)
from supervisor.core.probe_events import (  # members of Event (re-exported)
    AuthResult as AuthResult,
    DrainProgress as DrainProgress,
    FirstGeneration as FirstGeneration,
    GenerationDone as GenerationDone,
    HealthResult as HealthResult,
    KeyFileChecked as KeyFileChecked,
    ProbeRound as ProbeRound,
    SmokeChecked as SmokeChecked,
    StackRead as StackRead,
)

# --- time -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """Posted every ~1 s by the loop: deadlines, probe schedule, backoff, FATAL re-alerts."""


# --- daemon ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DaemonStarted:
    """The daemon (re)started; ``boot_changed`` when the host boot id differs from the persisted one;
    ``wedged_at`` when the previous run ended uncleanly with a host reboot (about when the host went down)."""

    boot_changed: bool
    wedged_at: float | None = None


@dataclass(frozen=True)
class ContainerObserved:
    """Result of inspecting the profile's container at daemon start (None id: no such container)."""

    container_id: str | None
    running: bool
    exit_code: int | None
    restart_policy: str = "no"  # Docker's own: anything but "no" fights the supervisor over restarts


@dataclass(frozen=True)
class ConfigReloaded:
    """The profile's configuration changed (``reload``, SIGHUP): check the container against it.

    Never a bounce: a running container that no longer matches is only marked (drift).
    """


@dataclass(frozen=True)
class HandoverRequested:
    """Profile ``to`` of the same seat is being started: drain, then stop (a manual stop, intent stop)."""

    to: str


@dataclass(frozen=True)
class LastGoodSaved:
    """The spec of this profile's start that reached RUNNING is now its last known good."""

    fingerprint: str


@dataclass(frozen=True)
class DriftChecked:
    """How container ``container_id`` differs from the profile: differing ``fields`` (empty: matches),
    ``detail`` one masked line per difference; ``error`` when Docker could not tell."""

    container_id: str
    fields: tuple[str, ...] = ()
    detail: str = ""
    error: str | None = None


# --- start sequence ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PreflightDone:
    """The cheap pre-start checks finished (bind mount sources exist); settling comes after the slot."""

    ok: bool
    detail: str
    mem_available_gib: float | None
    #: Free memory in blocks of 4 MiB or more, in 4 MiB blocks (/proc/buddyinfo; None: unreadable)
    free_4mib_blocks: int | None = None


@dataclass(frozen=True)
class SlotAcquired:
    """The host-wide load slot is ours (loads are serialized on a host)."""


@dataclass(frozen=True)
class Settled:
    """The host was settled with the load slot held (caches dropped, memory back, /dev/shm swept).

    ``ok`` False: memory did not come back in time; the start is postponed (no breaker record).
    ``mem_available_gib``: MemAvailable right before the container is created.
    """

    ok: bool
    detail: str
    mem_available_gib: float | None


@dataclass(frozen=True)
class ContainerStarted:
    """The container was created (at wall time ``created_at``) and started.

    ``image_id``: the Docker image id it runs (None if Docker did not say); ``fingerprint``: the config
    fingerprint of this start (docs/kv-pool.md); ``gmu``: its ``--gpu-memory-utilization``.
    """

    container_id: str
    created_at: float | None = None
    image_id: str | None = None
    fingerprint: str | None = None
    gmu: float | None = None


@dataclass(frozen=True)
class ContainerInfo:
    """What the watcher's first inspect of a container found: when it started (uptime, adoption)."""

    container_id: str
    started_at: float | None


@dataclass(frozen=True)
class ObserveFailed:
    """Docker did not answer the look at the profile's container (engine down or hung): decide nothing."""

    error: str


@dataclass(frozen=True)
class ContainerStartFailed:
    """Creating or starting the container failed.

    ``transient``: Docker itself did not answer (engine down or timed out) -- nothing about the model
    server is known, so this postpones the start without counting against the circuit breaker.
    """

    error: str
    transient: bool = False
    #: The config fingerprint of the spec it tried to create (last known good: was the config changed?).
    fingerprint: str | None = None
    #: The ledger outcome when not ``failed_create`` (a failed overlay check: Outcome.FAILED_OVERLAY_MISSING).
    outcome: str | None = None


@dataclass(frozen=True)
class MemoryPressure:
    """The host memory guard tripped: stop this profile's container before the host freezes."""

    detail: str


# --- container ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerExited:
    """The container died or stopped.

    ``signal``: the last kill signal Docker reported for it before it died (``"15"``/``"SIGTERM"`` for a
    ``docker stop``), None if none. The machine decides whether that stop was asked for.
    ``container_id`` (when known) lets the machine ignore a late exit of an older container.
    """

    exit_code: int | None
    signal: str | None
    oom_killed: bool
    container_id: str | None = None


@dataclass(frozen=True)
class ContainerSignalled:
    """Docker reported a kill signal sent to the container (``"15"``: ``docker stop``'s SIGTERM, dockerd's
    on its way down, or ours). The exit follows (ContainerExited, carrying the same signal); meanwhile a
    probe failure may be that stop in progress (machine.outside)."""

    signal: str
    container_id: str


@dataclass(frozen=True)
class DockerLink:
    """The container's watch lost Docker's events stream (``up`` False: Docker stopped answering, e.g.
    dockerd going down or crashed) or has it again (``up`` True; the events of the outage follow it)."""

    up: bool
    container_id: str


@dataclass(frozen=True)
class ExternalStopChecked:
    """After an outside SIGTERM: ``engine_restarting`` when Docker stopped answering within a few seconds
    (dockerd stops every container on its way down), False when it kept answering (an operator)."""

    engine_restarting: bool


@dataclass(frozen=True)
class DockerAnswered:
    """The answer to WaitDocker: ``ok`` when Docker answered within the limit; ``was_down`` when it did
    not answer at least once first (only then is answering news)."""

    ok: bool
    was_down: bool


@dataclass(frozen=True)
class ContainerStopped:
    """The StopContainer action completed (the exit may also arrive as ContainerExited, in any order)."""


@dataclass(frozen=True)
class StartDiagnosed:
    """The diagnosis of a failed start (its log tail plus the kernel log since it began)."""

    outcome: str
    cause: str | None
    diagnosis: str
    root_cause: str | None = None  # the traceback's last exception line (core/vllm/root_cause.py)
    where: str | None = None  # "path:line in func" it was raised in, when the traceback shows it
    fingerprint: str | None = None  # the config fingerprint of the start (or run) it explains


@dataclass(frozen=True)
class KvBaseline:
    """The KV-pool baseline of the current start: the best pool of the newest EARLIER starts with the
    same config ``fingerprint`` in the ledger (None: no earlier draw), and those draws (``recent``, newest
    first: how many bad ones came in a row). Answers ReadKvBaseline."""

    tokens: int | None
    fingerprint: str | None = None
    recent: tuple[int, ...] = ()
    best_usage: tuple[tuple[str, float], ...] = ()  # the best draw's "Actual usage" breakdown
    best_kv_gib: float | None = None  # the best draw's "Available KV cache memory"


Event = (
    Tick
    | ConfigReloaded
    | DriftChecked
    | HandoverRequested
    | LastGoodSaved
    | StartRequested
    | StopRequested
    | RestartRequested
    | ResetRequested
    | MaintenanceRequested
    | DaemonStarted
    | ContainerObserved
    | ContainerSignalled
    | DockerLink
    | PreflightDone
    | SlotAcquired
    | Settled
    | ShmSwept
    | KernelReport
    | HardFloor
    | ReserveMeasured
    | HostAfterStop
    | ContainerStarted
    | ContainerInfo
    | ObserveFailed
    | ContainerStartFailed
    | LogProgress
    | LogReady
    | LogKvPool
    | LogStartupFailure
    | LogEngineDead
    | LogMarker
    | MemoryPressure
    | ContainerExited
    | ContainerStopped
    | ExternalStopChecked
    | DockerAnswered
    | HealthResult
    | ProbeRound
    | GenerationDone
    | FirstGeneration
    | SmokeChecked
    | AuthResult
    | KeyFileChecked
    | DrainProgress
    | StartDiagnosed
    | KvBaseline
    | LoadActivity
    | LoadHistory
    | AdoptedMarkers
    | StackRead
)

#: Events that answer an operator command (the machine replies to each with a Reply action).

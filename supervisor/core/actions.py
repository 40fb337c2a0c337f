"""Outputs of the state machine: frozen values the daemon loop executes (the machine does no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ObserveContainer:
    """Look at the profile's container (by name); answer ContainerObserved, or ObserveFailed."""


@dataclass(frozen=True)
class CheckExternalStop:
    """A container got a SIGTERM we did not send: ask Docker for a few seconds whether it is shutting down
    (an engine restart stops every container that way); answer ExternalStopChecked."""


@dataclass(frozen=True)
class WaitDocker:
    """A create failed because Docker did not answer: ping it every fraction of a second for up to
    ``limit_s`` (the backoff delay) and answer DockerAnswered, so the start is retried the moment the
    engine is back (a dockerd restart) instead of at the next backoff step."""

    limit_s: float


@dataclass(frozen=True)
class RunPreflight:
    """The cheap checks before asking for the load slot (bind sources); answer with PreflightDone."""


@dataclass(frozen=True)
class Settle:
    """With the load slot held: sweep /dev/shm, drop caches, wait for memory; answer ShmSwept + Settled."""


@dataclass(frozen=True)
class CheckReserve:
    """Read MemAvailable now that the server is ready; answer with ReserveMeasured."""


@dataclass(frozen=True)
class CheckHostAfterStop:
    """After ``container_id`` went away: orphans (found, maybe killed) and memory; answer HostAfterStop.

    ``mem_back_gib``: the job waits (briefly) for MemAvailable to reach this (None: no waiting).
    """

    container_id: str
    mem_before_gib: float | None
    mem_back_gib: float | None


@dataclass(frozen=True)
class AcquireSlot:
    """Ask for the host-wide load slot; answer with SlotAcquired (possibly much later)."""


@dataclass(frozen=True)
class ReleaseSlot:
    """Give the load slot back (idempotent on the loop side)."""


@dataclass(frozen=True)
class CreateAndStart:
    """Remove a stale container of the profile's name, create a fresh one, start it, watch it.

    Answer with ContainerStarted(container_id) or ContainerStartFailed(error). ``last_good``: create the
    profile's last known good spec instead of the profile's (a rollback, docs/operations.md).
    """

    last_good: bool = False
    #: kv_pool.pin apply: add ``--kv-cache-memory-bytes N`` to the profile's command for this start
    kv_cache_memory_bytes: int | None = None


@dataclass(frozen=True)
class KillContainer:
    """SIGKILL the container at once, no grace (a kernel memory error, the hard memory floor: the host has
    seconds left); answer with ContainerStopped once it is down. Runs on a thread of its own, never
    behind a graceful stop or other jobs."""

    reason: str
    container_id: str | None = None


@dataclass(frozen=True)
class StopContainer:
    """Stop the container (SIGTERM, then SIGKILL after ``grace_s``); answer with ContainerStopped.

    ``container_id`` None means the profile's current container (by name).
    """

    grace_s: float
    reason: str
    container_id: str | None = None


@dataclass(frozen=True)
class ProbeHealth:
    """Poll ``/health`` once; answer with HealthResult."""


@dataclass(frozen=True)
class RunProbeRound:
    """Run one liveness round: /health and /metrics (answer ProbeRound) and, when ``generation``, send a
    real generation as a job of its own (answer GenerationDone, however long it takes). ``measure``:
    record the latencies as performance (False during the warm-up after ready)."""

    generation: bool
    measure: bool = True
    container_id: str | None = field(default=None, compare=False)  # whose CPU time the round reads


@dataclass(frozen=True)
class ReadEngineStack:
    """Read the engine core's Python stack from outside the container (py-spy, ``samples`` dumps over about
    ``budget_s``); answer with StackRead (also on failure: its ``error`` says why there is none)."""

    container_id: str
    budget_s: float
    samples: int = 3
    purpose: str = "stuck"  # "stuck" (the emergency stop waits for it) or "diagnose" (an operator's)


@dataclass(frozen=True)
class RunFirstGeneration:
    """Run the first real generation after ready; answer with FirstGeneration."""


@dataclass(frozen=True)
class RunSmokeGates:
    """Run the profile's smoke gates (after the first generation, before RUNNING); answer SmokeChecked."""


@dataclass(frozen=True)
class CheckAuth:
    """Send a request without the key; answer with AuthResult."""


@dataclass(frozen=True)
class CheckKeyFile:
    """Compare the API key file with the running container's key (by hash); answer KeyFileChecked."""


@dataclass(frozen=True)
class PollDrain:
    """Read ``vllm:num_requests_running``; answer with DrainProgress."""


@dataclass(frozen=True)
class WatchContainer:
    """Start streaming the logs and Docker events of this container (also on adoption).

    ``created_at``: when we created it (its whole log and events are replayed); None when adopted.
    """

    container_id: str
    created_at: float | None = None


@dataclass(frozen=True)
class CheckDrift:
    """Compare this container with the profile's spec (off the loop); answer with DriftChecked."""

    container_id: str


@dataclass(frozen=True)
class Emit:
    """A history/log event with a stable dotted name and JSON-safe fields."""

    name: str
    fields: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Alert:
    """A transition worth a human's attention."""

    severity: str  # "info" | "warning" | "critical"
    title: str
    old_state: str
    new_state: str
    reason: str
    #: (label, value) lines for the message: container, restarts, breaker, KV pool.
    details: tuple[tuple[str, str], ...] = ()
    #: The last failed start's diagnosis, when this alert is about a failure.
    diagnosis: str | None = None
    #: A failed start recorded in the same step is being diagnosed: send once its diagnosis is known.
    await_diagnosis: bool = False
    #: The message catalogue's id (supervisor/core/alerts/catalog.py), e.g. "breaker.open": the title, the
    #: "what to do" line and their translations come from there; ``title`` stays the English title.
    kind: str = ""
    #: Values the catalogue's templates for ``kind`` fill in (name, text).
    params: tuple[tuple[str, str], ...] = ()
    #: The condition this alert raises (or, with ``resolves``, resolves), e.g. "breaker": one resolved
    #: message is sent per raised one (flip-based, like a monitoring service).
    condition: str | None = None
    resolves: bool = False


@dataclass(frozen=True)
class RecordStart:
    """One KV/start ledger row per start attempt outcome."""

    outcome: str
    kv_tokens: int | None
    max_concurrency: float | None
    load_s: float | None
    mem_available_gib: float | None
    container_id: str | None = None
    #: When the attempt's container was created (or started, if adopted): the diagnosis reads from there.
    since: float | None = None
    #: Kernel-log events seen shortly before a failure (summaries): the kernel cause in the ledger.
    kernel: tuple[str, ...] = ()
    kv_gib: float | None = None
    model_gib: float | None = None
    gmu: float | None = None
    image_id: str | None = None
    fingerprint: str | None = None
    usage: tuple[tuple[str, float], ...] = ()  # vLLM's "Actual usage" breakdown (ledger key "usage")


@dataclass(frozen=True)
class ReadKvBaseline:
    """Compute the KV-pool baseline from the start ledger (off the loop); answer with KvBaseline.

    The median of the earlier draws with ``fingerprint`` (None: any); ``exclude`` is the current start's
    container id when its row is already written (an adopted container), else None.
    """

    fingerprint: str | None
    exclude: str | None = None


@dataclass(frozen=True)
class SaveLastGood:
    """The start in ``container_id`` reached RUNNING: keep the spec it was created from as the last known
    good (0600 file); answer LastGoodSaved."""

    container_id: str


@dataclass(frozen=True)
class ReportFailedChange:
    """A changed config failed ``failures`` starts in a row: alert with how it differs from the last known
    good (``action``: rollback | hold); ``old_state``/``new_state`` of the failing step."""

    action: str
    failures: int
    old_state: str
    new_state: str
    image_id: str | None = None  # the image the failing start ran (compared by id with the last known good)


@dataclass(frozen=True)
class Reply:
    """The answer to the operator event being processed."""

    ok: bool
    message: str


@dataclass(frozen=True)
class SampleLoad:
    """Read the loading container's CPU time and block IO from its cgroup; answer LoadActivity."""

    container_id: str


Action = (
    ObserveContainer
    | CheckExternalStop
    | WaitDocker
    | RunPreflight
    | Settle
    | CheckReserve
    | CheckHostAfterStop
    | AcquireSlot
    | ReleaseSlot
    | CreateAndStart
    | StopContainer
    | KillContainer
    | ProbeHealth
    | RunProbeRound
    | RunFirstGeneration
    | RunSmokeGates
    | CheckAuth
    | CheckKeyFile
    | PollDrain
    | WatchContainer
    | CheckDrift
    | Emit
    | Alert
    | RecordStart
    | ReadKvBaseline
    | SaveLastGood
    | ReportFailedChange
    | Reply
    | SampleLoad
    | ReadEngineStack
)

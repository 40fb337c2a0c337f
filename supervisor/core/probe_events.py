"""Inputs of the state machine from the probes: /health while loading, liveness rounds, the first
generation, the smoke gates, the auth check, the key file and the drain. Members of
:data:`supervisor.core.events.Event` (re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict: ``ok``; ``detail`` says why not (or what was seen); ``value`` is the gate's
    measure (stream_usage: completion tokens in the last chunk; degeneration: the repeated share)."""

    name: str
    kind: str
    ok: bool
    detail: str = ""
    latency_ms: float | None = None
    value: float | None = None


@dataclass(frozen=True)
class GateRecord:
    """The last result of one gate as kept in the profile's state (``ProfileState.smoke``; status)."""

    name: str = ""
    kind: str = ""
    policy: str = ""
    ok: bool = False
    detail: str = ""
    at: float | None = None
    latency_ms: float | None = None
    value: float | None = None


@dataclass(frozen=True)
class HealthResult:
    """One ``/health`` poll while STARTING."""

    ok: bool
    status: int | None
    latency_ms: float
    error: str | None


@dataclass(frozen=True)
class ProbeRound:
    """One liveness round while up: /health and /metrics, and a real generation's verdict when the round
    waited for it (the daemon sends the generation as a job of its own and answers it with GenerationDone,
    so ``gen_ok`` is None: not part of this round)."""

    health_ok: bool
    health_status: int | None
    gen_ok: bool | None
    gen_latency_ms: float | None
    gen_error: str | None
    requests_running: float | None
    requests_waiting: float | None
    generation_tokens_total: float | None
    prompt_tokens_total: float | None = None
    iterations_total: float | None = None  # vllm:iteration_tokens_total_count (steps that output)
    kv_usage: float | None = None  # vllm:kv_cache_usage_perc, 0..1
    cpu_s: float | None = None  # the container's CPU time (cgroup), seconds
    thread_demand: float | None = None  # the busiest thread's runnable share since the last round
    preemptions_total: float | None = None  # vllm:num_preemptions_total
    #: The GPU's power draw (W) where the box reports it (NVML/nvidia-smi, Jetson power rails); recorded
    #: only: no decision rests on it (docs/vllm-facts.md "A hang that burns a core")
    gpu_power_w: float | None = None


@dataclass(frozen=True)
class GenerationDone:
    """The liveness generation sent by a probe round answered (``ok``: completion tokens > 0) or failed."""

    ok: bool
    latency_ms: float | None
    error: str | None


@dataclass(frozen=True)
class FirstGeneration:
    """The first real generation after ready (also the maintenance smoke test)."""

    ok: bool
    latency_ms: float | None
    error: str | None


@dataclass(frozen=True)
class SmokeChecked:
    """The smoke gates ran (answers RunSmokeGates): one result per configured gate, in config order."""

    results: tuple[GateResult, ...]


@dataclass(frozen=True)
class AuthResult:
    """A request without the key: ``enforced`` (401), ``open`` (served), ``unknown`` (could not tell)."""

    status: str
    url: str = ""  # the base URL that was asked (named in the alert)


@dataclass(frozen=True)
class KeyFileChecked:
    """The API key file compared (by hash) with the key the running container was created with.

    ``differs``: the file holds another key now (rotated: a restart applies it). ``key_id`` names the
    file's key without revealing it (a salted hash prefix, stable within one daemon process).
    """

    differs: bool
    key_id: str | None = None


@dataclass(frozen=True)
class DrainProgress:
    """``vllm:num_requests_running`` while draining (None: metrics unavailable)."""

    requests_running: float | None


@dataclass(frozen=True)
class StackFrame:
    """One Python frame: the function, its file (as py-spy names it) and the line."""

    function: str
    file: str
    line: int

    def text(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class StackRead:
    """What the stack read found for one engine (answers ReadEngineStack). ``frames``: the top frames of the
    engine core's main thread in the last sample (empty when none was read); ``same``: in how many of the
    ``samples`` the top frame was the same function of the same file; ``error``: why there is no stack (no
    py-spy, no permission, no engine-core process, a timeout). ``pid``: the host pid read."""

    container_id: str
    frames: tuple[StackFrame, ...] = ()
    samples: int = 0
    same: int = 0
    error: str | None = None
    pid: int | None = None
    purpose: str = "stuck"  # "stuck" (before an emergency stop) or "diagnose" (an operator's request)

    def summary(self) -> str:
        """One line for an alert: the top frames, or why there are none."""
        if not self.frames:
            return f"no stack ({self.error or 'not read'})"
        where = " <- ".join(f.text() for f in self.frames[:3])
        return f"{where} (same top frame in {self.same} of {self.samples} samples)"

    def as_fields(self) -> dict[str, object]:
        """JSON-safe fields for the history and the flight recorder."""
        return {
            "container_id": self.container_id,
            "pid": self.pid,
            "frames": [{"function": f.function, "file": f.file, "line": f.line} for f in self.frames],
            "samples": self.samples,
            "same": self.same,
            "error": self.error,
            "purpose": self.purpose,
        }

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

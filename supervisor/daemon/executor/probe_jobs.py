"""The HTTP probes behind each probing action (pool jobs, run off the loop): /health while STARTING, the
liveness round and its canary while up, the first generation, the smoke gates, the keyless check and the
drain poll. Each returns the events the machine handles; every call is bounded in time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import structlog

from supervisor.adapters.host import gpupower, pystack
from supervisor.adapters.host.cputime import ThreadDemand, container_cpu_s, container_io_bytes
from supervisor.adapters.vllm import chat as chat_probes, probes
from supervisor.config import Profile
from supervisor.config.smoke import SmokeGate
from supervisor.core.events import (
    AuthResult,
    DrainProgress,
    Event,
    FirstGeneration,
    GenerationDone,
    HealthResult,
    LoadActivity,
    ProbeRound,
    SmokeChecked,
)
from supervisor.core.probe_events import GateResult
from supervisor.core.vllm import smoke
from supervisor.core.vllm.metrics import VllmMetrics

log = structlog.get_logger("supervisor.probe_jobs")

#: Health, auth and drain checks never wait longer than this, whatever the probe timeout.
SHORT_TIMEOUT_S = 10.0
#: Told each liveness probe's latency: (kind "health" | "generation", seconds).
ProbeTimer = Callable[[str, float], None]
#: Gives the API key the probes send: the running container's (``LiveKey.value``; may inspect it).
KeyFn = Callable[[], str | None]


def health(profile: Profile) -> list[Event]:
    """One /health poll while STARTING."""
    r = probes.check_health(
        profile.base_url, min(profile.probes.timeout_s, SHORT_TIMEOUT_S), profile.probes.health_path
    )
    return [HealthResult(r.ok, r.status, r.latency_ms, r.error)]


def load_activity(container_id: str, demand: ThreadDemand | None = None) -> list[Event]:
    """The loading container's CPU time, block IO (two cgroup file reads) and its busiest thread's runnable
    share since the last sample (``demand``: one schedstat read per thread). A read
    that fails answers no readings (nothing seen moving), so the machine's silence verdict, which waits for
    a sample (machine/loads.silence_seen), still comes."""
    try:
        threads = demand.read(container_id, time.monotonic()) if demand is not None else None
        cpu, io = container_cpu_s(container_id), container_io_bytes(container_id)
    except Exception as exc:  # noqa: BLE001 - any failure is "no readings", never a missing answer
        log.warning("load.sample_failed", container=container_id, error=f"{type(exc).__name__}: {exc}")
        return [LoadActivity(container_id, None, None, None)]
    return [LoadActivity(container_id, cpu, io, threads)]


def _metrics(profile: Profile) -> VllmMetrics | None:
    """The /metrics summary; None when unavailable."""
    mres, text = probes.fetch_metrics(profile.base_url, min(profile.probes.timeout_s, SHORT_TIMEOUT_S))
    if not mres.ok:
        return None
    return VllmMetrics.from_text(text)


def generate(profile: Profile, key: KeyFn) -> probes.ProbeResult:
    """One real generation with the profile's probe settings and the running container's key."""
    p = profile.probes
    return probes.generate(
        profile.base_url,
        key(),
        profile.served_model_name or profile.container.name,
        kind=p.generation_kind,
        prompt=p.prompt,
        max_tokens=p.max_tokens,
        timeout=p.timeout_s,
    )


def probe_round(
    profile: Profile,
    timed: ProbeTimer | None = None,
    container_id: str | None = None,
    demand: ThreadDemand | None = None,
) -> list[Event]:
    """One liveness round: /health, /metrics, the container's CPU time and its busiest thread's runnable
    share (``demand``; the forward-progress signals, docs/state-machine.md "Liveness"), each HTTP call
    bounded by the short timeout and the probe interval (so a hung API server cannot stretch the cadence);
    /metrics is skipped when /health fails (the same process serves both). The canary runs as a job of its
    own. The /health latency is told to ``timed``."""
    p = profile.probes
    bound = min(p.timeout_s, SHORT_TIMEOUT_S, p.interval_s)
    h = probes.check_health(profile.base_url, bound, p.health_path)
    if timed is not None:
        timed("health", h.latency_ms / 1000.0)
    m = (_metrics(profile) if p.metrics and h.ok else None) or VllmMetrics.from_samples({})
    cpu_s = container_cpu_s(container_id) if container_id else None
    threads = demand.read(container_id, time.monotonic()) if demand is not None and container_id else None
    running, waiting, gen = m.requests_running, m.requests_waiting, m.generation_tokens_total
    ev = ProbeRound(h.ok, h.status, None, None, None, running, waiting, gen, m.prompt_tokens_total)
    ev = replace(ev, iterations_total=m.iterations_total, kv_usage=m.kv_cache_usage, cpu_s=cpu_s)
    ev = replace(ev, preemptions_total=m.preemptions_total, gpu_power_w=gpupower.gpu_power_w())
    return [replace(ev, thread_demand=threads)]


def liveness_generation(profile: Profile, key: KeyFn, timed: ProbeTimer | None = None) -> list[Event]:
    """The canary: a streamed 1-token request, answered at its first token (waits up to the probe
    timeout; the machine does not wait for it). Its latency is told to ``timed``."""
    p = profile.probes
    g = probes.canary(
        profile.base_url,
        key(),
        profile.served_model_name or profile.container.name,
        kind=p.generation_kind,
        prompt=p.prompt,
        timeout=p.timeout_s,
    )
    if timed is not None:
        timed("generation", g.latency_ms / 1000.0)
    return [GenerationDone(g.ok, g.latency_ms, g.error)]


def first_generation(profile: Profile, key: KeyFn) -> list[Event]:
    """The first real generation after ready (also the maintenance smoke test)."""
    g = generate(profile, key)
    return [FirstGeneration(g.ok, g.latency_ms, g.error)]


def smoke_gates(profile: Profile, key: KeyFn) -> list[Event]:
    """Run the profile's smoke gates one after the other (each bounded by its timeout)."""
    api_key = key()
    return [SmokeChecked(tuple(smoke_gate(profile, g, api_key) for g in profile.smoke.gates))]


def smoke_gate(profile: Profile, gate: SmokeGate, key: str | None) -> GateResult:
    """One smoke gate against the profile's server (with the running container's key): send, judge.
    Every gate judges the answer's content, or its reasoning when the content is empty."""
    if gate.kind == smoke.KIND_TOOL_CALL:
        return _tool_call_gate(profile, gate, key)
    if gate.kind in (smoke.KIND_STREAM_USAGE, smoke.KIND_DECODE_FLOOR):
        return _stream_gate(profile, gate, key)
    result = GateResult
    a = _chat(profile, gate, key)
    if not a.ok:
        return result(gate.name, gate.kind, False, a.error or "failed", a.latency_ms)
    text = smoke.judged_text(a.text, a.reasoning)
    if gate.kind == smoke.KIND_DEGENERATION:
        ok, share, detail = smoke.judge_degeneration(text, gate.threshold)
        return result(gate.name, gate.kind, ok, detail, a.latency_ms, round(share, 4))
    if gate.kind == smoke.KIND_THINK_LEAK:
        ok, detail = smoke.judge_think_leak(a.text, gate.markers)
        return result(gate.name, gate.kind, ok, detail, a.latency_ms)
    ok, detail = smoke.judge_contains(text, gate.substring)
    return result(gate.name, gate.kind, ok, detail, a.latency_ms)


def _chat(
    profile: Profile, gate: SmokeGate, key: str | None, tool_choice: str | None = None
) -> chat_probes.ChatAnswer:
    """The gate's chat request (with ``tool_choice``: offering the gate's tool)."""
    return chat_probes.chat(
        profile.base_url,
        key,
        profile.served_model_name or profile.container.name,
        prompt=gate.prompt,
        max_tokens=gate.max_tokens,
        timeout=gate.timeout_s,
        tool=gate.tool if tool_choice is not None else None,
        tool_choice=tool_choice or "required",
        enable_thinking=gate.enable_thinking,
    )


def _stream_gate(profile: Profile, gate: SmokeGate, key: str | None) -> GateResult:
    """stream_usage (the last chunk's usage) and decode_floor (tokens/s of the streamed answer)."""
    result = GateResult
    s = chat_probes.stream_chat(
        profile.base_url,
        key,
        profile.served_model_name or profile.container.name,
        prompt=gate.prompt,
        max_tokens=gate.max_tokens,
        timeout=gate.timeout_s,
        enable_thinking=gate.enable_thinking,
    )
    if not s.ok:
        return result(gate.name, gate.kind, False, s.error or "failed", s.latency_ms)
    tokens = s.last_usage_tokens
    if gate.kind == smoke.KIND_DECODE_FLOOR:
        rate = smoke.decode_rate(tokens, s.last_token_ms)
        ok, detail = smoke.judge_decode_floor(rate, tokens, gate.min_tokens_per_s)
        return result(
            gate.name, gate.kind, ok, detail, s.latency_ms, round(rate, 2) if rate is not None else None
        )
    if tokens is None:
        detail = f"no usage in the last of {s.chunks} chunks (stream_options.include_usage ignored)"
        return result(gate.name, gate.kind, False, detail, s.latency_ms)
    detail = f"completion_tokens {tokens} in the last of {s.chunks} chunks"
    return result(gate.name, gate.kind, tokens > 0, detail, s.latency_ms, float(tokens))


def _tool_call_gate(profile: Profile, gate: SmokeGate, key: str | None) -> GateResult:
    """The tool_call gate: ``tool_choice`` ``required``, then ``auto`` when that did not call the tool
    (some servers answer ``required`` with HTTP 400 or no call while ``auto`` works); passes on either."""
    failures: list[str] = []
    latency = 0.0
    for choice in smoke.TOOL_CHOICES:
        a = _chat(profile, gate, key, choice)
        latency += a.latency_ms
        if not a.ok and a.status != 400:
            # refused, unreachable, 5xx: the server, not the mode (400: e.g. this mode is not supported)
            return GateResult(gate.name, gate.kind, False, a.error or "failed", latency)
        if not a.ok:
            failures.append(f"tool calls ({choice}): {a.error or 'failed'}")
            continue
        text = smoke.judged_text(a.text, a.reasoning)
        ok, detail = smoke.judge_tool_call(gate.tool, a.tool_calls, choice, text)
        if ok:  # the detail keeps what the modes tried before said
            return GateResult(gate.name, gate.kind, True, "; ".join([*failures, detail]), latency)
        failures.append(detail)
    return GateResult(gate.name, gate.kind, False, "; ".join(failures), latency)


def auth(profile: Profile) -> list[Event]:
    """A request without the key: refused (enforced), or served (open: alerted, more loudly if a key is
    configured)."""
    r = probes.check_auth(profile.base_url, min(profile.probes.timeout_s, SHORT_TIMEOUT_S))
    return [AuthResult(r.status, profile.base_url)]


def drain(profile: Profile) -> list[Event]:
    """Requests still running (None: metrics unavailable)."""
    mres, text = probes.fetch_metrics(profile.base_url, min(profile.probes.timeout_s, SHORT_TIMEOUT_S))
    running = VllmMetrics.from_text(text).requests_running if mres.ok else None
    return [DrainProgress(running)]


def engine_stack(container_id: str, budget_s: float, samples: int, purpose: str) -> list[Event]:
    """Where the engine core is (py-spy, bounded by ``budget_s``): answers ReadEngineStack."""
    read = pystack.read_stack(container_id, budget_s, samples, purpose)
    log.info("engine.stack", container_id=container_id[:12], detail=read.summary(), purpose=purpose)
    return [read]

"""The slow work behind the machine's actions: each job does its I/O and returns the events answering it.

Jobs run on the executor's pool, never on the loop. They read only their arguments (the profile's
configuration and the values carried by the action) and the adapters; they never read or change a
profile's state. An empty answer means "nothing is known" (e.g. a stop Docker did not confirm).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import structlog

from supervisor.adapters import host, probes
from supervisor.adapters.container_spec import inspect_spec
from supervisor.adapters.cputime import container_cpu_s
from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.adapters.secrets import spec_with_key
from supervisor.config import Profile
from supervisor.config.smoke import SmokeGate
from supervisor.core import kvpool, smoke
from supervisor.core.clock import Clock
from supervisor.core.errors import ContainerMissing, EngineUnreachable, HostError, SupervisorError
from supervisor.core.events import (
    AuthResult,
    ContainerExited,
    ContainerObserved,
    ContainerStarted,
    ContainerStartFailed,
    ContainerStopped,
    DockerAnswered,
    DrainProgress,
    DriftChecked,
    Event,
    ExternalStopChecked,
    FirstGeneration,
    GenerationDone,
    HealthResult,
    ObserveFailed,
    PreflightDone,
    ProbeRound,
    SmokeChecked,
)
from supervisor.core.machine.ops import UNWANTED
from supervisor.core.spec.drift import DriftItem, drift_fields, spec_drift
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.metrics import VllmMetrics

log = structlog.get_logger("supervisor.jobs")

#: Label put on every container the daemon creates.
MANAGED_LABEL = "vllm-supervisor.profile"
#: Health, auth and drain checks never wait longer than this, whatever the probe timeout.
SHORT_TIMEOUT_S = 10.0
#: Told each liveness probe's latency: (kind "health" | "generation", seconds).
ProbeTimer = Callable[[str, float], None]
#: Gives the API key the probes send: the running container's (``LiveKey.value``; may inspect it).
KeyFn = Callable[[], str | None]


# ---- container ---------------------------------------------------------------------------------------


def observe(docker: DockerAdapter, profile: Profile) -> list[Event]:
    """Look at the profile's container by name: found (running or not), absent, or Docker silent."""
    try:
        status = docker.status(profile.container.name)
    except SupervisorError as exc:
        return [ObserveFailed(str(exc))]
    if status is None:
        return [ContainerObserved(None, False, None)]
    return [ContainerObserved(status.id, status.running, status.exit_code)]


def missing_bind_sources(spec: ContainerSpec) -> list[str]:
    """Host paths of bind mounts that do not exist (weights, patched files): a start would be wasted."""
    return [m.source for m in spec.mounts if m.type == "bind" and not os.path.exists(m.source)]


def preflight(profile: Profile) -> list[Event]:
    """The cheap checks before the load slot is asked for: bind sources exist (settling comes later)."""
    missing = missing_bind_sources(profile.container)
    if missing:
        # Docker would silently create an empty directory and vLLM would fail minutes later
        return [PreflightDone(False, "bind mount source does not exist: " + ", ".join(missing), None)]
    try:
        mem: float | None = host.mem_available_gib()
    except (HostError, OSError, ValueError):
        mem = None
    return [PreflightDone(True, "", mem)]


def create_and_start(
    docker: DockerAdapter,
    name: str,
    spec: ContainerSpec,
    declared: Sequence[str],
    clock: Clock,
    stand_in_image_id: str | None = None,
) -> list[Event]:
    """Remove a stale container of the spec's name, create a fresh one from ``spec`` (already resolved:
    the profile's or the last known good, key injected), start it.

    ``declared``: env names holding secrets (masked in the fingerprint); ``stand_in_image_id``: the image
    id the fingerprint of a failed create uses when the tag is the one it stood for before.
    """
    try:
        if docker.status(spec.name) is not None:
            docker.remove(spec.name, force=True)
        created = clock.now()
        cid = docker.create(spec, {MANAGED_LABEL: name})
        docker.start(cid)
    except EngineUnreachable as exc:
        return [ContainerStartFailed(str(exc), transient=True)]
    except SupervisorError as exc:
        fingerprint = kvpool.spec_fingerprint(spec, stand_in_image_id, declared)
        return [ContainerStartFailed(str(exc), fingerprint=fingerprint)]
    image_id = _image_id(docker, cid)
    fingerprint = kvpool.spec_fingerprint(spec, image_id, declared)
    gmu = kvpool.gpu_memory_utilization([*(spec.entrypoint or ()), *spec.command])
    # the machine answers with WatchContainer(cid) and ReadKvBaseline(fingerprint)
    return [ContainerStarted(cid, created, image_id=image_id, fingerprint=fingerprint, gmu=gmu)]


def _image_id(docker: DockerAdapter, container_id: str) -> str | None:
    """The image id a container was created from (None if Docker does not say: the tag stands in)."""
    try:
        status = docker.status(container_id)
    except SupervisorError as exc:
        log.warning("container.image_id_unknown", container_id=container_id[:12], error=str(exc))
        return None
    return status.image_id if status is not None else None


#: After an outside SIGTERM, Docker is asked this long whether it is going down (it stops every container
#: with SIGTERM first, then exits within a second or two).
ENGINE_CHECK_S = 6.0
ENGINE_CHECK_EVERY_S = 0.5


def check_external_stop(docker: DockerAdapter, sleep: Callable[[float], object] = time.sleep) -> list[Event]:
    """Did dockerd stop the container on its way down (it stops answering) or did an operator (it answers)?"""
    pinger = docker.with_timeout(2.0)
    try:
        for _ in range(int(ENGINE_CHECK_S / ENGINE_CHECK_EVERY_S)):
            try:
                pinger.ping()
            except SupervisorError:
                return [ExternalStopChecked(engine_restarting=True)]
            sleep(ENGINE_CHECK_EVERY_S)
    finally:
        pinger.close()
    return [ExternalStopChecked(engine_restarting=False)]


#: How often wait_docker pings an engine that is not answering.
WAIT_DOCKER_EVERY_S = 0.25


def wait_docker(
    docker: DockerAdapter,
    limit_s: float,
    every_s: float = WAIT_DOCKER_EVERY_S,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> list[Event]:
    """Ping Docker every ``every_s`` until it answers or ``limit_s`` passed (at least one ping)."""
    pinger = docker.with_timeout(2.0)
    deadline = monotonic() + limit_s
    was_down = False
    try:
        while True:
            try:
                pinger.ping()
                return [DockerAnswered(ok=True, was_down=was_down)]
            except SupervisorError:
                was_down = True
            if monotonic() + every_s > deadline:
                return [DockerAnswered(ok=False, was_down=True)]
            sleep(every_s)
    finally:
        pinger.close()


def stop(docker: DockerAdapter, ref: str, grace: float, reason: str, container_id: str | None) -> list[Event]:
    """Stop; answer ContainerStopped only when the container is known to be down.

    A stop Docker refused or did not answer (engine down, timeout) proves nothing: no answer, so the
    machine stays STOPPING and re-issues the stop when it is overdue, instead of reporting STOPPED
    while the container may still run. A stray container's stop never answers for ours.
    """
    try:
        docker.stop(ref, grace)
    except ContainerMissing:
        if reason == UNWANTED:
            return []
        return [ContainerExited(None, None, False, container_id)]
    except SupervisorError as exc:
        log.error("container.stop_failed", reason=reason, container=ref, error=str(exc))
        return []
    return [] if reason == UNWANTED else [ContainerStopped()]


def profile_drift(docker: DockerAdapter, profile: Profile, ref: str | None = None) -> tuple[DriftItem, ...]:
    """How the container (``ref``, default the profile's by name) differs from the profile now.

    Raises ContainerMissing when there is no such container, the adapter's errors when Docker is silent.
    """
    have = inspect_spec(docker, ref or profile.container.name)
    if have is None:
        raise ContainerMissing(f"no container {ref or profile.container.name}")
    want = spec_with_key(profile.api_key, profile.container)
    key = profile.api_key
    secret = frozenset(n for n in ((key.env, key.inject_env) if key else ()) if n)
    return spec_drift(
        want,
        have.spec,
        image_env=dict(have.image_env),
        secret_names=secret,
        ignore_labels=frozenset({MANAGED_LABEL}),
    )


def check_drift(docker: DockerAdapter, profile: Profile, container_id: str) -> list[Event]:
    """Compare container ``container_id`` with the profile (after adoption and after a reload)."""
    try:
        items = profile_drift(docker, profile, container_id)
    except SupervisorError as exc:
        return [DriftChecked(container_id, error=str(exc))]
    detail = "; ".join(i.line() for i in items)
    return [DriftChecked(container_id, drift_fields(items), detail[:2000])]


# ---- probes ------------------------------------------------------------------------------------------


def health(profile: Profile) -> list[Event]:
    """One /health poll while STARTING."""
    r = probes.check_health(
        profile.base_url, min(profile.probes.timeout_s, SHORT_TIMEOUT_S), profile.probes.health_path
    )
    return [HealthResult(r.ok, r.status, r.latency_ms, r.error)]


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
    cpu: Callable[[str | None], float | None] = container_cpu_s,
) -> list[Event]:
    """One liveness round: /health, /metrics and the container's CPU time (the forward-progress
    signals, docs/state-machine.md "Liveness"), each HTTP call bounded by the short timeout and the probe
    interval (so a hung API server cannot stretch the cadence); /metrics is skipped when /health fails
    (the same process serves both). The canary runs as a job of its own. The /health latency is told
    to ``timed``."""
    p = profile.probes
    bound = min(p.timeout_s, SHORT_TIMEOUT_S, p.interval_s)
    h = probes.check_health(profile.base_url, bound, p.health_path)
    if timed is not None:
        timed("health", h.latency_ms / 1000.0)
    m = (_metrics(profile) if p.metrics and h.ok else None) or VllmMetrics.from_samples({})
    cpu_s = cpu(container_id) if container_id else None
    running, waiting, gen = m.requests_running, m.requests_waiting, m.generation_tokens_total
    ev = ProbeRound(h.ok, h.status, None, None, None, running, waiting, gen, m.prompt_tokens_total)
    return [replace(ev, iterations_total=m.iterations_total, kv_usage=m.kv_cache_usage, cpu_s=cpu_s)]


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


def smoke_gate(profile: Profile, gate: SmokeGate, key: str | None) -> smoke.GateResult:
    """One smoke gate against the profile's server (with the running container's key): send, judge."""
    model = profile.served_model_name or profile.container.name
    result = smoke.GateResult
    if gate.kind == smoke.KIND_STREAM_USAGE:
        s = probes.stream_chat(
            profile.base_url,
            key,
            model,
            prompt=gate.prompt,
            max_tokens=gate.max_tokens,
            timeout=gate.timeout_s,
        )
        if not s.ok:
            return result(gate.name, gate.kind, False, s.error or "failed", s.latency_ms)
        tokens = s.last_usage_tokens
        if tokens is None:
            detail = f"no usage in the last of {s.chunks} chunks (stream_options.include_usage ignored)"
            return result(gate.name, gate.kind, False, detail, s.latency_ms)
        ok = tokens > 0
        detail = f"completion_tokens {tokens} in the last of {s.chunks} chunks"
        return result(gate.name, gate.kind, ok, detail, s.latency_ms, float(tokens))
    tool = gate.tool if gate.kind == smoke.KIND_TOOL_CALL else None
    a = probes.chat(
        profile.base_url,
        key,
        model,
        prompt=gate.prompt,
        max_tokens=gate.max_tokens,
        timeout=gate.timeout_s,
        tool=tool,
    )
    if not a.ok:
        return result(gate.name, gate.kind, False, a.error or "failed", a.latency_ms)
    if gate.kind == smoke.KIND_TOOL_CALL:
        ok = gate.tool in a.tool_calls
        called = ", ".join(a.tool_calls) or "none"
        detail = f"tool calls: {called}" + ("" if ok else f"; answer {smoke.sample(a.text)}")
        return result(gate.name, gate.kind, ok, detail, a.latency_ms)
    if gate.kind == smoke.KIND_DEGENERATION:
        ok, share, detail = smoke.judge_degeneration(a.text, gate.threshold)
        return result(gate.name, gate.kind, ok, detail, a.latency_ms, round(share, 4))
    ok, detail = smoke.judge_contains(a.text, gate.substring)
    return result(gate.name, gate.kind, ok, detail, a.latency_ms)


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

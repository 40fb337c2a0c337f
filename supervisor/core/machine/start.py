"""The start sequence: PREFLIGHT -> WAITING (slot, then settle) -> STARTING -> RUNNING (and its failures)."""

from __future__ import annotations

from supervisor.core.actions import (
    AcquireSlot,
    CheckAuth,
    CheckDrift,
    CreateAndStart,
    ProbeHealth,
    RunFirstGeneration,
    Settle,
    WatchContainer,
)
from supervisor.core.events import (
    ContainerStarted,
    ContainerStartFailed,
    HealthResult,
    LogEngineDead,
    LogMarker,
    LogProgress,
    LogReady,
    LogStartupFailure,
    PreflightDone,
    Settled,
)
from supervisor.core.host.contiguity import contiguity_at_start
from supervisor.core.machine import last_good, loads, lottery
from supervisor.core.machine.builder import Step
from supervisor.core.profile_state import LastProbe, Load
from supervisor.core.states import State
from supervisor.core.vocab import Outcome, Pending, failure_rank


def on_preflight_done(c: Step, ev: PreflightDone) -> None:
    """PREFLIGHT: checks passed -> WAITING for the load slot; failed -> BACKOFF (no breaker record)."""
    if ev.ok:
        # PREFLIGHT -> WAITING
        low = contiguity_at_start(ev.free_4mib_blocks, c.policy.host.contiguity_min_free_blocks)
        if low is not None:  # the start goes on; the field's wedge needs a reboot, which is the operator's
            c.emit("start.contiguity_low", free_4mib_blocks=ev.free_4mib_blocks, detail=low)
            c.alert_kind("warning", "contiguity.start", State.PREFLIGHT, State.WAITING, low)
        c.set(preflight_failures=0)
        c.set_load(mem_available_gib=ev.mem_available_gib)
        c.do(AcquireSlot())
        c.to(State.WAITING, "preflight ok")
        return
    # PREFLIGHT -> BACKOFF (a preflight failure is not a failed start: nothing was launched)
    c.emit("preflight.failed", detail=ev.detail, mem_available_gib=ev.mem_available_gib)
    postpone(c, "preflight failed", ev.detail)


def postpone(c: Step, what: str, detail: str) -> None:
    """-> BACKOFF without a breaker record: the start could not even be tried (host or Docker not ready)."""
    p = c.policy
    failures = c.s.preflight_failures + 1
    backoff = c.s.backoff.next(c.now, p.backoff.initial_s, p.backoff.factor, p.backoff.max_s)
    retry_at = backoff.retry_at if backoff.retry_at is not None else c.now
    c.set(preflight_failures=failures, backoff=backoff)
    old = c.to(State.BACKOFF, f"{what}: {detail}")
    c.emit("backoff.scheduled", attempt=backoff.attempt, delay_s=retry_at - c.now, retry_at=retry_at)
    if failures == 1:  # alert once per streak; every retry is in the history
        c.alert_kind("warning", "start.postponed", old, State.BACKOFF, detail, what=what)


def on_slot_acquired(c: Step) -> None:
    """WAITING: the load slot is ours; settle the host (shm sweep, drop caches, memory) right before the load.

    Settling before the slot was granted would be undone by the load that held it (page cache, memory).
    """
    c.set(slot_held=True)
    c.set_load(settle_since=c.now)  # status: memory_wait (the settle job waits for the memory floor)
    c.do(Settle())
    c.emit("settle.begun")


def on_settled(c: Step, ev: Settled) -> None:
    """WAITING (slot held) -> STARTING: launch a fresh container; memory did not settle -> BACKOFF."""
    c.set_load(settle_since=None)
    if not ev.ok:
        # WAITING -> BACKOFF (no breaker record: nothing was launched)
        c.emit("settle.failed", detail=ev.detail, mem_available_gib=ev.mem_available_gib)
        c.release_slot()
        postpone(c, "host memory did not settle", ev.detail)
        return
    p = c.policy
    c.emit("settle.done", detail=ev.detail, mem_available_gib=ev.mem_available_gib)
    # WAITING -> STARTING
    c.set(
        container_id=None,
        adopted=False,
        load=Load(
            started_at=c.now,
            deadline=c.now + p.startup.deadline_s,
            last_progress_at=c.now,
            silence_s=p.startup.silence_timeout_s,
            mem_available_gib=(
                ev.mem_available_gib if ev.mem_available_gib is not None else c.s.load.mem_available_gib
            ),
        ),
        auth=None,
        consecutive_failures=0,
        kv=c.s.kv.fresh(),
    )
    c.set(mem_before_start_gib=c.s.load.mem_available_gib)
    c.do(CreateAndStart(last_good=last_good.spec_for_start(c)))
    c.to(State.STARTING, "slot acquired, host settled")


def tick_waiting(c: Step) -> None:
    """WAITING on Tick: ask for the load slot again (the holder may have released it); not while settling."""
    if not c.s.slot_held:
        c.do(AcquireSlot())


def adopt(c: Step, container_id: str) -> None:
    """A running container found at daemon start: watch it and treat it as (maybe) still loading."""
    p = c.policy
    if container_id != c.s.container_id:
        c.set(kv=c.s.kv.fresh())  # not the container we started: its config is unknown
    # * -> STARTING (adopted; no CreateAndStart)
    c.set(
        container_id=container_id,
        adopted=True,
        load=Load(
            started_at=c.now,
            deadline=c.now + max(p.startup.deadline_s, p.startup.adopt_grace_s),
            last_progress_at=c.now,
            silence_s=p.startup.adopt_grace_s,
            next_health_at=c.now,
        ),
        consecutive_failures=0,
        pending=None,
        container_created_at=None,
        container_started_at=None,
        mem_before_start_gib=None,
    )
    # it may be mid-load: take the host's load slot when free (never waited for: the load is under way)
    c.do(WatchContainer(container_id), AcquireSlot(), CheckDrift(container_id))
    c.emit("adopt.container", container_id=container_id)
    c.to(State.STARTING, "adopted running container")


def on_container_started(c: Step, ev: ContainerStarted) -> None:
    """STARTING: the fresh container is up; stream its logs and events."""
    # made from the profile as it is now: nothing drifts
    c.set(
        container_id=ev.container_id, container_created_at=ev.created_at, container_started_at=None, drift=()
    )
    # the silence window counts from here: the create before it (a busy dockerd, an image pull) is not the
    # load's silence (machine/loads.silence_seen; startup.deadline_s bounds it)
    c.set_load(last_progress_at=c.now)
    lottery.on_container_started(c, ev)
    c.do(WatchContainer(ev.container_id, ev.created_at))
    c.emit("container.started", container_id=ev.container_id)


def start_failed_now(c: Step, outcome: str, reason: str, detail: str = "") -> None:
    """STARTING, container already gone -> BACKOFF/FATAL."""
    c.set_load(failure_outcome=outcome, failure_detail=detail or c.s.load.failure_detail)
    c.fail(reason, outcome)


def start_failed_stop(c: Step, outcome: str, reason: str, detail: str = "") -> None:
    """STARTING, container still up -> STOPPING (pending failed_start) -> BACKOFF/FATAL on exit.

    With the emergency grace, not the planned one: a failed start serves nobody, so there is nothing to
    drain, and real vLLM 0.32 does not act on SIGTERM while its engine initialises (docs/vllm-facts.md
    "SIGTERM"): a planned grace of 120 s would let a load the memory guard stopped allocate for two more
    minutes, and only the SIGKILL ends it anyway."""
    c.set_load(failure_outcome=outcome, failure_detail=detail or c.s.load.failure_detail)
    c.stop(reason, Pending.FAILED_START, grace_s=c.policy.urgent_grace_s())


def on_start_failed(c: Step, ev: ContainerStartFailed) -> None:
    """STARTING -> BACKOFF/FATAL: create/start failed (a transient failure: external.on_start_deferred)."""
    # STARTING -> BACKOFF | FATAL
    c.set_kv(fingerprint=ev.fingerprint)  # the config it tried: a changed one failing? (last known good)
    start_failed_now(c, ev.outcome or Outcome.FAILED_CREATE, "container start failed", ev.error)


def _progress(c: Step) -> None:
    c.set_load(last_progress_at=c.now, activity="log")


def on_log_progress(c: Step, ev: LogProgress) -> None:
    """STARTING: loading progressed; extends the silence deadline."""
    if ev.phase and ev.phase != c.s.load.phase:
        c.emit("load.phase", phase=ev.phase, pct=ev.pct)
    c.set_load(pct=ev.pct if ev.pct is not None else c.s.load.pct, phase=ev.phase or c.s.load.phase)
    _progress(c)


def on_log_ready(c: Step, _ev: LogReady) -> None:
    """STARTING: ``Application startup complete.``; start polling /health now (or, without
    ``ready_requires_health``, go straight to the first generation)."""
    if c.s.load.ready_seen:
        return
    c.set_load(ready_seen=True, next_health_at=c.now + c.policy.health_poll_s)
    _progress(c)
    c.emit("log.ready", load_s=c.load_s())
    if c.s.load.first_gen_sent:
        return
    if c.policy.startup.ready_requires_health or c.s.adopted:
        c.do(ProbeHealth())
    else:
        _serving_check(c, None)


def on_startup_failure(c: Step, ev: LogStartupFailure) -> None:
    """STARTING: the log proves the start failed; wait for the exit, but not longer than the stop grace."""
    c.emit("start.failure_logged", outcome=ev.outcome, detail=ev.detail)
    deadline = c.s.load.deadline if c.s.load.deadline is not None else c.now
    current = c.s.load.failure_outcome
    keep = current is not None and failure_rank(current) >= failure_rank(ev.outcome)
    c.set_load(
        failure_outcome=current if keep else ev.outcome,
        failure_detail=c.s.load.failure_detail if keep else ev.detail,
        deadline=min(deadline, c.now + c.policy.stop.grace_s),
    )


def on_engine_dead_starting(c: Step, ev: LogEngineDead) -> None:
    """STARTING -> STOPPING: the engine died during the start (e.g. on the first generation)."""
    # STARTING -> STOPPING (failed_start)
    c.emit("engine.dead", detail=ev.detail)
    start_failed_stop(c, Outcome.ENGINE_DEAD, "engine dead during start", ev.detail)


def on_marker_starting(c: Step, ev: LogMarker) -> None:
    """STARTING: a forbidden marker fails the start; an expected one is remembered."""
    if ev.forbidden:
        # STARTING -> STOPPING (failed_start)
        c.emit("log.forbidden_marker", marker=ev.name)
        start_failed_stop(c, Outcome.FAILED_FORBIDDEN_MARKER, "forbidden log marker", ev.name)
        return
    if ev.name not in c.s.load.markers_seen:
        c.set_load(markers_seen=(*c.s.load.markers_seen, ev.name))
        c.emit("log.marker_seen", marker=ev.name)


def _health_polling(c: Step) -> bool:
    ld = c.s.load
    return (ld.ready_seen or c.s.adopted) and not ld.first_gen_sent


def on_health(c: Step, ev: HealthResult) -> None:
    """STARTING: ready needs LogReady AND /health ok (adopted: /health ok alone), then a first generation.
    Before the ready line, the answer to a silence verdict's question (:func:`judge_silence`)."""
    ld = c.s.load
    if not ev.ok and not ld.ready_seen:
        c.set_load(silence_health_failed_at=c.now)
    if not _health_polling(c):
        if ld.silence_health_asked_at is not None and not ld.ready_seen and not ld.first_gen_sent:
            _silence_answered(c, ev)
        return  # else a stale answer: polling has not begun or is over
    if not ev.ok:
        # an adopted container not answering yet is mid-load: the start its dead daemon began (ready.py)
        loading = c.s.load.adopted_loading or c.s.adopted
        c.set_load(next_health_at=c.now + c.policy.health_poll_s, adopted_loading=loading)
        return
    _serving_check(c, ev.latency_ms)


def _serving_check(c: Step, health_latency_ms: float | None) -> None:
    """STARTING, ready (``/health`` ok, or the log line alone): markers, then a first generation and the
    request without the key (always: with no key configured it tells whether the port is open)."""
    missing = [m for m in c.policy.markers.expected_names() if m not in c.s.load.markers_seen]
    if missing and not c.s.adopted:
        # STARTING -> STOPPING (failed_start): a setting silently did nothing
        start_failed_stop(c, Outcome.FAILED_MARKER_MISSING, "expected log marker missing", ",".join(missing))
        return
    c.set_load(health_ok=health_latency_ms is not None, first_gen_sent=True, next_health_at=None)
    if health_latency_ms is not None:
        c.set(last_probe=LastProbe(ok=True, latency_ms=health_latency_ms, at=c.now))
        c.emit("start.health_ok", latency_ms=health_latency_ms, adopted=c.s.adopted)
    else:
        c.emit("start.ready_on_log", adopted=c.s.adopted)
    c.do(RunFirstGeneration())
    if c.policy.probes.unauthorized_check:
        c.do(CheckAuth())


def judge_silence(c: Step) -> bool:
    """STARTING (on Tick, a load sample's answer, a /health answer): no log line, no CPU, no IO for
    silence_s, seen by a sample taken after the window ended (machine/loads.silence_seen), and /health not
    answering either, asked after the window ended -> STOPPING (failed_start). True when it stopped the
    load.

    The /health question: the log comes through dockerd, the CPU and IO from the kernel. A dockerd slow to
    deliver the log (a CI run: 10 s to start a container, its log lines arriving in bursts) left a load
    that had finished, its CPU quiet and its ready line not yet delivered, stopped as silent while its API
    answered. vLLM listens only once loaded (a load's /health is refused), so /health ok is progress."""
    ld = c.s.load
    silent = loads.window_ran_out(c)
    if silent is None or not loads.silence_seen(c, c.now - silent):
        return False  # not silent long enough, or the verdict waits for a sample (loads.tick asks for one)
    window_end = c.now - silent + ld.silence_s
    failed = ld.silence_health_failed_at
    if failed is None or failed < window_end:
        asked = ld.silence_health_asked_at
        if asked is None or asked < window_end:
            c.set_load(silence_health_asked_at=c.now)
            c.do(ProbeHealth())
        return False  # the verdict waits for /health's answer (on_health)
    c.emit("start.timeout", kind="silence", silent_s=silent, pct=ld.pct, phase=ld.phase)
    start_failed_stop(c, Outcome.TIMEOUT_SILENCE, "no loading progress")
    return True


def _silence_answered(c: Step, ev: HealthResult) -> None:
    """STARTING, before the ready line: the /health a silence verdict asked for. Answering is progress (the
    load is over, its log late); refused, the verdict is given now (judge_silence)."""
    ld = c.s.load
    c.set_load(silence_health_asked_at=None)
    if not ev.ok:
        judge_silence(c)
        return
    if ld.activity != "health":
        silent = c.now - ld.last_progress_at if ld.last_progress_at is not None else None
        c.emit("load.activity", signal="health", silent_s=silent, pct=ld.pct, phase=ld.phase)
    c.set_load(last_progress_at=c.now, activity="health")


def tick_starting(c: Step) -> None:
    """STARTING on Tick: hard deadline, silence deadline, /health polling."""
    p = c.policy
    ld = c.s.load
    # guard against the wall clock jumping backwards: cap every deadline to its configured length
    hard = max(p.startup.deadline_s, p.startup.adopt_grace_s) if c.s.adopted else p.startup.deadline_s
    deadline = min(ld.deadline if ld.deadline is not None else c.now + hard, c.now + hard)
    last_progress = min(ld.last_progress_at if ld.last_progress_at is not None else c.now, c.now)
    next_health = ld.next_health_at
    if next_health is not None:
        next_health = min(next_health, c.now + p.health_poll_s)
    if (deadline, last_progress, next_health) != (ld.deadline, ld.last_progress_at, ld.next_health_at):
        c.set_load(deadline=deadline, last_progress_at=last_progress, next_health_at=next_health)
    if c.now >= deadline:
        # STARTING -> STOPPING (failed_start: timeout)
        c.emit("start.timeout", kind="deadline", load_s=c.load_s(), pct=ld.pct, phase=ld.phase)
        outcome = ld.failure_outcome or Outcome.TIMEOUT
        start_failed_stop(c, outcome, "start deadline reached")
        return
    if judge_silence(c):
        return
    # CPU time and block IO samples (progress too; at once when the window ran out), the slow-load warning
    loads.tick(c, sample_now=loads.window_ran_out(c) is not None)
    if c.s.adopted and not c.s.slot_held:
        c.do(AcquireSlot())  # an adopted load holds the slot as soon as it is free
    if _health_polling(c) and next_health is not None and c.now >= next_health:
        if not p.startup.ready_requires_health and ld.ready_seen and not c.s.adopted:
            _serving_check(c, None)  # a first generation is retried without /health
            return
        c.set_load(next_health_at=c.now + p.health_poll_s)
        c.do(ProbeHealth())

"""RUNNING / DEGRADED: probe schedule, probe-round evaluation (saturation, stall), emergency stop."""

from __future__ import annotations

import math
from dataclasses import replace

from supervisor.core.actions import CheckKeyFile, RunProbeRound
from supervisor.core.events import GenerationDone, LogEngineDead, LogMarker, ProbeRound, StackRead
from supervisor.core.machine import external, liveness, notices, stuck as stuck_stop
from supervisor.core.machine.builder import Step
from supervisor.core.profile_state import LastProbe, Stall
from supervisor.core.states import State
from supervisor.core.vocab import Pending


def tick_serving(c: Step) -> None:
    """RUNNING/DEGRADED on Tick: schedule probe rounds; reset the backoff after a healthy period."""
    p = c.policy
    nxt = c.s.next_probe_at
    if nxt is None or nxt > c.now + p.probes.interval_s:  # none yet, or the clock jumped backwards
        nxt = c.now + p.probes.interval_s if nxt is not None else c.now
        c.set(next_probe_at=nxt)
    healthy = c.s.healthy_since
    if healthy is not None and healthy > c.now:
        healthy = c.now
        c.set(healthy_since=healthy)
    if healthy is not None and c.now - healthy >= p.backoff.reset_after_s and c.s.backoff.attempt > 0:
        c.emit("backoff.reset", healthy_s=c.now - healthy, attempts=c.s.backoff.attempt)
        c.set(backoff=c.s.backoff.reset())
    if c.now >= nxt:
        c.set(next_probe_at=c.now + p.probes.interval_s)
        # the canary: only when the server looks idle (busy engines prove themselves by their progress)
        send = p.probes.generation and not c.s.gen_in_flight and liveness.looks_idle(c.s.stall)
        if send:
            c.set(gen_in_flight=True)
            if c.s.gen_pending_since is None:
                c.set(gen_pending_since=c.now, gen_pending_tokens=c.s.stall.last_tokens)
        ready = c.s.ready_at
        if ready is not None and ready > c.now:  # the clock jumped backwards
            ready = c.now
            c.set(ready_at=ready)
        warm = ready is None or c.now - ready >= p.probes.warmup_s
        c.do(RunProbeRound(generation=send, measure=warm, container_id=c.s.container_id))
        if p.watch_key_file:
            c.do(CheckKeyFile())


def _healthy(c: Step, latency_ms: float | None) -> None:
    """Proof of life: failures cleared, DEGRADED -> RUNNING."""
    c.set(last_probe=LastProbe(ok=True, latency_ms=latency_ms, at=c.now))
    if c.s.healthy_since is None:
        c.set(healthy_since=c.now)
    if c.s.consecutive_failures or c.s.state == State.DEGRADED:
        c.emit("probe.recovered", after_failures=c.s.consecutive_failures)
    c.set(consecutive_failures=0)
    if c.s.state == State.DEGRADED:
        # DEGRADED -> RUNNING
        notices.recovered(c, c.to(State.RUNNING, "probe ok"), "probe ok")


def on_generation_done(c: Step, ev: GenerationDone) -> None:
    """RUNNING/DEGRADED: the liveness generation answered: proof of life, or an error for the next round."""
    if not c.s.gen_in_flight:
        return  # a late answer of a generation sent to an earlier container
    c.set(gen_in_flight=False)
    if ev.ok:
        c.set(gen_pending_since=None, gen_pending_tokens=None, gen_last_error=None)
        st = c.s.stall
        moved = st.progress_at is not None and st.work_since is not None and st.progress_at >= st.work_since
        if liveness.looks_idle(st) and not moved:
            # the canary was the only work and nothing else moved: idle again (the next one starts afresh)
            c.set(stall=replace(st, work_since=None, rate_since=None))
        _healthy(c, ev.latency_ms)
        return
    # no verdict yet: the metrics known now are as old as the last round; the next round (one interval after
    # the send at most) judges the pending period with fresh ones (saturation or failure)
    c.set(gen_last_error=ev.error)


def _health_failed(c: Step, ev: ProbeRound) -> None:
    """/health did not answer 200: a failure; failing ``canary_deadline_s`` in a row (or
    ``probes.failure_threshold`` rounds) is an emergency (the API server is stopped or wedged)."""
    p = c.policy
    st = c.s.stall
    failing_since = st.health_failing_since if st.health_failing_since is not None else c.now
    failing_since = min(failing_since, c.now)
    c.set(stall=replace(st, health_failing_since=failing_since, verdict="stuck", signal="/health failing"))
    c.set(last_probe=LastProbe(ok=False, latency_ms=ev.gen_latency_ms, at=c.now))
    failures = c.s.consecutive_failures + 1
    if c.now - failing_since >= p.probes.canary_deadline_s:
        failures = max(failures, p.probes.failure_threshold)
    _failure(c, "health", failures, health_status=ev.health_status, gen_error=ev.gen_error)


def on_probe_round(c: Step, ev: ProbeRound) -> None:
    """Evaluate one liveness round (RUNNING/DEGRADED): /health, then forward progress (liveness.py)."""
    p = c.policy
    if c.s.stuck_reason is not None:
        return  # judged stuck: its stack is being read and the stop follows (stuck.py)
    c.set(probe_rounds=c.s.probe_rounds + 1)  # one more judged (`status`: liveness.rounds)
    if ev.gen_ok is not None:
        # a round that waited for its own generation carries the verdict: nothing is pending any more
        c.set(gen_in_flight=False, gen_pending_since=None, gen_pending_tokens=None)
    if not ev.health_ok:
        _health_failed(c, ev)
        return
    health_back = c.s.stall.health_failing_since is not None  # the last round's /health failed
    if health_back:
        c.set(stall=replace(c.s.stall, health_failing_since=None))
    baseline = c.s.stall.last_round_at is not None
    stuck = liveness.progress(c, ev)
    st = c.s.stall
    if stuck is not None:
        c.emit(
            "probe.stalled", reason=stuck, requests_running=ev.requests_running, tokens_total=st.last_tokens
        )
        if not stuck_stop.begin(c, stuck):
            _stalled(c, stuck, None)
        return
    if ev.gen_ok is False:
        # a round that waited for its own generation, and it failed: busy (progress) is not broken
        c.set(last_probe=LastProbe(ok=False, latency_ms=ev.gen_latency_ms, at=c.now))
        if st.verdict == "busy" and p.probes.saturation_grace:
            c.emit("probe.saturated", gen_error=ev.gen_error, signal=st.signal)
        elif not baseline and st.verdict == "waiting":
            # first round with metrics under load: no baseline to tell saturation from death
            c.emit("probe.inconclusive", gen_error=ev.gen_error, requests_running=ev.requests_running)
        else:
            _failure(c, "generation", c.s.consecutive_failures + 1, gen_error=ev.gen_error)
        return
    since = c.s.gen_pending_since
    if since is not None and not c.s.gen_in_flight and c.s.gen_last_error:
        # our canary failed; progress since it was sent proves the engine busy, not broken
        error = f"{c.s.gen_last_error} ({c.now - since:.0f} s without a good answer)"
        c.set(gen_pending_since=None, gen_pending_tokens=None, gen_last_error=None)
        if st.progress_at is None or st.progress_at < since:
            _failure(c, "generation", c.s.consecutive_failures + 1, gen_error=error)
            return
        c.emit("probe.saturated", pending_s=c.now - since, signal=st.signal)
    elif since is not None and ev.requests_running is None and c.now - since >= p.probes.interval_s:
        # no metrics to judge progress by: the canary alone decides, counted in rounds since it was sent
        failures = max(c.s.consecutive_failures + 1, math.floor((c.now - since) / p.probes.interval_s) + 1)
        _failure(c, "generation", failures, gen_error=f"no answer ({c.now - since:.0f} s)")
        return
    elif since is not None and st.verdict == "busy":
        c.emit("probe.saturated", pending_s=c.now - since, signal=st.signal)
    if c.s.state == State.DEGRADED and not health_back and not _moved_since(c.s.stall, c.s.since):
        # DEGRADED for a failed generation or a stall: /health 200 alone does not prove the engine (a frozen
        # EngineCore still answers it), so it stays DEGRADED, its failures counted, until a canary answers
        # or the engine makes progress (before, each such round resolved it and the next canary raised it
        # again: 4 to 8 alerts per stuck engine in the fault matrix, 2 to 3 with this rule)
        return
    _healthy(c, ev.gen_latency_ms)


def _stalled(c: Step, reason: str, read: StackRead | None) -> None:
    """The stuck engine's emergency stop, with where it hung when its stack was read (stuck.py)."""
    failures = max(c.policy.probes.failure_threshold, c.s.consecutive_failures + 1)
    where = None if read is None else read.summary()
    _failure(c, "stalled", failures, gen_error=reason, where=where)


def on_stack_read(c: Step, ev: StackRead) -> None:
    """The stack the stuck engine's stop waited for: stop it now."""
    if stuck_stop.answered(c, ev):
        reason, read = stuck_stop.take(c, ev)
        _stalled(c, reason, read)


def tick_stuck(c: Step) -> None:
    """The stack did not come within the wait: stop the stuck engine without it."""
    if stuck_stop.overdue(c):
        reason, read = stuck_stop.take(c, None)
        _stalled(c, reason, read)


def _moved_since(st: Stall, at: float) -> bool:
    """Whether the engine made forward progress (liveness.py) at or after ``at``."""
    return st.progress_at is not None and st.progress_at >= at


def _failure(c: Step, kind: str, failures: int, where: str | None = None, **fields: object) -> bool:
    """Record ``failures`` consecutive failures; RUNNING -> DEGRADED, or an emergency at the threshold
    (``where``: a stuck engine's stack, for the emergency's reason)."""
    p = c.policy
    c.set(consecutive_failures=failures, healthy_since=None)
    c.set(last_probe=LastProbe(ok=False, latency_ms=None, at=c.now))
    c.emit("probe.failed", kind=kind, consecutive=failures, threshold=p.probes.failure_threshold, **fields)
    held = external.emergency_held(c) if failures >= p.probes.failure_threshold else None
    if held is not None:
        c.emit("probe.emergency_held", kind=kind, consecutive=failures, reason=held)
    elif failures >= p.probes.failure_threshold:
        why = f"{failures} consecutive probe failures ({kind})"
        if kind == "stalled" and fields.get("gen_error"):
            why += f": {fields['gen_error']}"
        if where is not None:
            why += f"; where it hung: {where}"
        emergency(c, why)
        return True
    if c.s.state == State.RUNNING:
        # RUNNING -> DEGRADED
        old = c.to(State.DEGRADED, f"probe failed ({kind})")
        limit = f"{failures} of {p.probes.failure_threshold} failures before an emergency stop"
        notices.degraded(c, old, f"{kind} probe failed ({limit}): {_failure_detail(kind, fields)}")
    return False


def _failure_detail(kind: str, fields: dict[str, object]) -> str:
    """What failed, for a human: the /health answer, the generation's error, or the frozen tokens."""
    if kind == "health":
        status = fields.get("health_status")
        return f"/health answered HTTP {status}" if status is not None else "/health did not answer"
    if kind == "stalled":
        return str(fields.get("gen_error") or "no forward progress while work is present")
    return str(fields.get("gen_error") or "no answer")


def emergency(c: Step, reason: str) -> None:
    """RUNNING/DEGRADED -> STOPPING (pending emergency): stop, then breaker and BACKOFF/FATAL."""
    old = c.s.state
    c.set(emergencies=c.s.emergencies + 1, stuck_reason=None, stuck_until=None)
    kernel = c.kernel_seen()
    reason += c.kernel_suffix()
    c.emit("emergency.stop", reason=reason, container_id=c.s.container_id, kernel=list(kernel))
    c.stop("emergency", Pending.EMERGENCY, grace_s=c.policy.urgent_grace_s())
    c.alert_kind("critical", "emergency.stop", old, State.STOPPING, reason)


def on_engine_dead_serving(c: Step, ev: LogEngineDead) -> None:
    """RUNNING/DEGRADED -> STOPPING: the engine is gone, act at once."""
    # RUNNING/DEGRADED -> STOPPING (emergency)
    c.emit("engine.dead", detail=ev.detail)
    emergency(c, f"engine dead: {ev.detail}")


def on_marker_serving(c: Step, ev: LogMarker) -> None:
    """RUNNING/DEGRADED: a forbidden marker is reported once per run; expected ones no longer matter.

    (A marker that matches every request would otherwise flood the history and the alerts.)
    """
    if not ev.forbidden or ev.name in c.s.load.markers_seen:
        return
    st = c.s.state
    c.set_load(
        markers_seen=(*c.s.load.markers_seen, ev.name)
    )  # Load is empty while serving: reused as "reported"
    c.emit("log.forbidden_marker", marker=ev.name)
    c.alert_kind("warning", "log.forbidden_marker", st, st, ev.name)

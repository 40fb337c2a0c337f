"""RUNNING / DEGRADED: probe schedule, probe-round evaluation (saturation, stall), emergency stop."""

from __future__ import annotations

import math

from supervisor.core.actions import CheckKeyFile, RunProbeRound
from supervisor.core.events import GenerationDone, LogEngineDead, LogMarker, ProbeRound
from supervisor.core.machine import notices
from supervisor.core.machine.builder import Step
from supervisor.core.profile_state import LastProbe, Stall
from supervisor.core.states import State
from supervisor.core.vocab import Pending


def tick_serving(c: Step) -> None:
    """RUNNING/DEGRADED on Tick: schedule probe rounds; reset the backoff after a healthy period."""
    p = c.policy
    nxt = c.s.next_probe_at
    if nxt is None or nxt > c.now + p.probe_interval_s:  # none yet, or the clock jumped backwards
        nxt = c.now + p.probe_interval_s if nxt is not None else c.now
        c.set(next_probe_at=nxt)
    healthy = c.s.healthy_since
    if healthy is not None and healthy > c.now:
        healthy = c.now
        c.set(healthy_since=healthy)
    if healthy is not None and c.now - healthy >= p.backoff_reset_after_s and c.s.backoff.attempt > 0:
        c.emit("backoff.reset", healthy_s=c.now - healthy, attempts=c.s.backoff.attempt)
        c.set(backoff=c.s.backoff.reset())
    if c.now >= nxt:
        c.set(next_probe_at=c.now + p.probe_interval_s)
        send = p.liveness_generation and not c.s.gen_in_flight
        if send:
            c.set(gen_in_flight=True)
            if c.s.gen_pending_since is None:
                c.set(gen_pending_since=c.now, gen_pending_tokens=c.s.stall.last_tokens)
        ready = c.s.ready_at
        if ready is not None and ready > c.now:  # the clock jumped backwards
            ready = c.now
            c.set(ready_at=ready)
        warm = ready is None or c.now - ready >= p.warmup_s
        c.do(RunProbeRound(generation=send, measure=warm))
        if p.watch_key_file:
            c.do(CheckKeyFile())


def _judge_pending_generation(c: Step) -> bool:
    """At each round: a generation unanswered for a whole interval is a failure, counted in rounds.

    The engine may be frozen while /health, /v1/models and /metrics answer at once (real vLLM 0.32 with its
    engine core stopped: docs/simulator.md "Frozen engine"); only our own generation tells, and it may hang
    for the whole probe timeout. So the verdict does not wait for it: ``failures = floor(pending / interval)
    + 1`` from the first unanswered send, and the threshold is reached ``interval x (threshold - 1)`` after
    it, whatever ``timeout_s`` is. Tokens that moved since then prove the engine alive (saturation): the
    period restarts. Returns True when it ended in an emergency.
    """
    p = c.policy
    since = c.s.gen_pending_since
    if since is None or since > c.now or c.now - since < p.probe_interval_s:
        return False
    tokens = c.s.stall.last_tokens
    baseline = c.s.gen_pending_tokens
    if tokens is not None and baseline is not None and tokens > baseline and p.saturation_grace:
        # busy, not broken: the engine produced tokens while our request waited in its queue
        c.emit("probe.saturated", pending_s=c.now - since, tokens_total=tokens)
        c.set(gen_pending_since=c.now, gen_pending_tokens=tokens)
        return False
    pending = c.now - since
    failures = max(c.s.consecutive_failures + 1, math.floor(pending / p.probe_interval_s) + 1)
    error = c.s.gen_last_error if not c.s.gen_in_flight and c.s.gen_last_error else "no answer"
    return _failure(c, "generation", failures, gen_error=f"{error} ({pending:.0f} s without a good answer)")


def _stall_update(c: Step, ev: ProbeRound) -> tuple[bool, float]:
    """Track frozen tokens while requests run; returns (stalled, stalled_for_s)."""
    st = c.s.stall
    tokens, running = ev.generation_tokens_total, ev.requests_running
    if tokens is None or running is None:
        c.set(stall=Stall(last_round_at=c.now))
        return False, 0.0
    frozen = st.last_tokens is not None and tokens == st.last_tokens
    since: float | None = None
    if running > 0 and frozen:
        # frozen since the previous round if a request was already running then
        prev_busy = st.last_running is not None and st.last_running > 0
        since = st.since if st.since is not None else (st.last_round_at if prev_busy else c.now)
        if since is None or since > c.now:
            since = c.now
    c.set(stall=Stall(last_tokens=tokens, last_running=running, since=since, last_round_at=c.now))
    if since is None:
        return False, 0.0
    stalled_for = c.now - since
    return stalled_for >= c.policy.stall_after_s, stalled_for


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
        _healthy(c, ev.latency_ms)
        return
    # no verdict yet: the metrics known now are as old as the last round; the next round (one interval after
    # the send at most) judges the pending period with fresh ones (saturation or failure)
    c.set(gen_last_error=ev.error)


def on_probe_round(c: Step, ev: ProbeRound) -> None:
    """Evaluate one liveness round (RUNNING/DEGRADED)."""
    p = c.policy
    if ev.gen_ok is not None:
        # a round that waited for its own generation carries the verdict: nothing is pending any more
        c.set(gen_in_flight=False, gen_pending_since=None, gen_pending_tokens=None)
    if c.s.gen_pending_since is not None and c.s.gen_pending_tokens is None:
        # the pending period's token baseline: the first count seen since it began
        c.set(gen_pending_tokens=ev.generation_tokens_total)
    prev_tokens = c.s.stall.last_tokens
    stalled, stalled_for = _stall_update(c, ev)
    ok = ev.health_ok and ev.gen_ok is not False
    if ok and not stalled:
        if ev.gen_ok is None and c.s.gen_pending_since is not None:
            # health and fresh metrics fine: the generation decides (its answer, or how long it is pending)
            _judge_pending_generation(c)
            return
        _healthy(c, ev.gen_latency_ms)
        return
    c.set(last_probe=LastProbe(ok=False, latency_ms=ev.gen_latency_ms, at=c.now))
    tokens = ev.generation_tokens_total
    advanced = prev_tokens is not None and tokens is not None and tokens > prev_tokens
    busy = (ev.requests_running or 0.0) + (ev.requests_waiting or 0.0) > 0
    if not stalled and advanced and busy and p.saturation_grace:
        # saturated, not broken: the engine produces tokens, our probe just did not get through
        c.emit(
            "probe.saturated",
            gen_error=ev.gen_error,
            requests_running=ev.requests_running,
            requests_waiting=ev.requests_waiting,
        )
        return
    if not stalled and busy and ev.health_ok and prev_tokens is None and tokens is not None:
        # first round with metrics under load: no baseline to tell saturation from death; the next decides
        c.emit("probe.inconclusive", gen_error=ev.gen_error, requests_running=ev.requests_running)
        return
    failures = c.s.consecutive_failures + 1
    if stalled:
        kind = "stalled"
        # count the whole frozen period in rounds, so a stuck engine escalates within interval x threshold
        failures = max(failures, math.floor(stalled_for / p.probe_interval_s) + 1)
        c.emit(
            "probe.stalled", stalled_s=stalled_for, requests_running=ev.requests_running, tokens_total=tokens
        )
    elif not ev.health_ok:
        kind = "health"
    else:
        kind = "generation"
    _failure(c, kind, failures, health_status=ev.health_status, gen_error=ev.gen_error)


def _failure(c: Step, kind: str, failures: int, **fields: object) -> bool:
    """Record ``failures`` consecutive failures; RUNNING -> DEGRADED, or an emergency at the threshold."""
    p = c.policy
    c.set(consecutive_failures=failures, healthy_since=None)
    c.set(last_probe=LastProbe(ok=False, latency_ms=None, at=c.now))
    c.emit("probe.failed", kind=kind, consecutive=failures, threshold=p.failure_threshold, **fields)
    if failures >= p.failure_threshold:
        emergency(c, f"{failures} consecutive probe failures ({kind})")
        return True
    if c.s.state == State.RUNNING:
        # RUNNING -> DEGRADED
        old = c.to(State.DEGRADED, f"probe failed ({kind})")
        limit = f"{failures} of {p.failure_threshold} failures before an emergency stop"
        notices.degraded(c, old, f"{kind} probe failed ({limit}): {_failure_detail(kind, fields)}")
    return False


def _failure_detail(kind: str, fields: dict[str, object]) -> str:
    """What failed, for a human: the /health answer, the generation's error, or the frozen tokens."""
    if kind == "health":
        status = fields.get("health_status")
        return f"/health answered HTTP {status}" if status is not None else "/health did not answer"
    if kind == "stalled":
        return "no token generated while requests run"
    return str(fields.get("gen_error") or "no answer")


def emergency(c: Step, reason: str) -> None:
    """RUNNING/DEGRADED -> STOPPING (pending emergency): stop, then breaker and BACKOFF/FATAL."""
    old = c.s.state
    c.set(emergencies=c.s.emergencies + 1)
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

"""STARTING -> RUNNING: the verdict on a loaded server. Its first real generation (retried: the first
requests after a load are slow), the smoke gates' hand-off (machine/smoke.py), then RUNNING (or DEGRADED
for an adopted server whose first generation failed), with what a ready start records and announces (a
start adopted mid-load included: its daemon died before it could)."""

from __future__ import annotations

from supervisor.core import vocab
from supervisor.core.actions import CheckReserve, ReleaseSlot, RunSmokeGates
from supervisor.core.events import FirstGeneration
from supervisor.core.machine import last_good, notices
from supervisor.core.machine.builder import Step
from supervisor.core.machine.start import start_failed_stop
from supervisor.core.profile_state import LastProbe, Load, Stall
from supervisor.core.states import State
from supervisor.core.vocab import Outcome


def on_first_generation(c: Step, ev: FirstGeneration) -> None:
    """STARTING -> RUNNING on a real generation (after the smoke gates, if any); a failed one fails our
    start (adopted: DEGRADED)."""
    if not c.s.load.first_gen_sent or c.s.load.smoke_sent:
        return
    if not ev.ok and not c.s.adopted:
        failures = c.s.load.first_gen_failures + 1
        denied = (ev.error or "").startswith(vocab.UNAUTHORIZED_ERROR)  # every retry would get the same 401
        if failures < c.policy.probes.failure_threshold and not denied:
            # STARTING (retry): the first requests after a load are slow (docs/field-notes.md item 9); one
            # timeout must not throw away a 20-minute load. Health polling resumes and sends another
            # generation.
            c.emit("start.first_generation_retry", error=ev.error, attempt=failures)
            c.set_load(
                first_gen_failures=failures,
                first_gen_sent=False,
                health_ok=False,
                next_health_at=c.now + c.policy.health_poll_s,
            )
            return
        # STARTING -> STOPPING (failed_start; a 401 opens the breaker at once: builder.fail)
        c.emit("start.first_generation_failed", error=ev.error, attempts=failures)
        why = vocab.UNAUTHORIZED_REASON if denied else "first generation failed"
        start_failed_stop(
            c, Outcome.FAILED_UNAUTHORIZED if denied else Outcome.FAILED_FIRST_GENERATION, why, ev.error or ""
        )
        return
    if ev.ok and not c.s.adopted and c.policy.smoke_gates:
        # STARTING (smoke gates): our start answered; check its answers before it serves (machine/smoke.py)
        c.set_load(smoke_sent=True, first_gen_ms=ev.latency_ms)
        c.emit("smoke.started", gates=[g.name for g in c.policy.smoke_gates])
        c.do(RunSmokeGates())
        return
    become_ready(c, ev.ok, ev.latency_ms, ev.error)


def become_ready(
    c: Step, ok: bool, latency_ms: float | None, error: str | None, reason: str = "first generation ok"
) -> State:
    """STARTING -> RUNNING (or DEGRADED: an adopted server whose first generation failed); returns the
    state left."""
    p = c.policy
    if c.s.adopted and not c.s.slot_held:
        c.do(ReleaseSlot())  # cancel the adoption's slot request if it is still pending
    c.release_slot()
    if not c.s.adopted:
        c.record_start(Outcome.READY)
        c.set(last_diagnosis=None, last_cause=None)
        last_good.on_ready(c)
    elif ok and c.s.load.adopted_loading:
        # adopted mid-load (its daemon died before ready): that start's ledger row, timed from the
        # container's own start (unknown if Docker did not say); one already serving records nothing
        c.set_load(started_at=c.s.container_started_at)
        c.record_start(Outcome.READY)
    c.emit(
        "start.ready",
        load_s=c.load_s(),
        latency_ms=latency_ms,
        adopted=c.s.adopted,
        kv_tokens=c.s.kv.tokens,
    )
    recovered = c.s.recovering
    maintenance = c.s.maintenance_run
    c.set(
        last_probe=LastProbe(ok=True, latency_ms=latency_ms, at=c.now),
        load=Load(),
        healthy_since=c.now,
        consecutive_failures=0,
        next_probe_at=c.now + p.probes.interval_s,
        gen_in_flight=False,
        gen_pending_since=None,
        gen_pending_tokens=None,
        stall=Stall(),  # a new container: the progress of the last one says nothing about it
        stuck_reason=None,
        stuck_until=None,
        recovering=False,
        maintenance_run=False,
        preflight_failures=0,
        ready_at=c.now,
    )
    if not ok:
        # adopted, so it served before this daemon came: one failed request under unknown load is not a
        # reason to bounce it; the probe rounds (saturation- and stall-aware) decide from here
        c.emit("start.first_generation_failed", error=error, adopted=True)
        c.set(last_probe=LastProbe(ok=False, latency_ms=None, at=c.now), healthy_since=None)
        c.set(consecutive_failures=1)
        old = c.to(State.DEGRADED, "first generation failed (adopted)")
        return notices.degraded(c, old, f"first generation failed (adopted): {error or 'no answer'}")
    old = c.to(State.RUNNING, reason)
    if p.host.reserve_gib > 0:
        c.do(CheckReserve())
    if maintenance:
        maintenance_done(c, old)
    if recovered:
        notices.recovered(c, old, reason)
    return old


def maintenance_done(c: Step, old: State) -> None:
    """A maintenance restart is serving again: an event and an info alert with the KV pool before/after."""
    before, after = c.s.maintenance_kv_before, c.s.kv.tokens
    c.set(maintenance_kv_before=None)
    c.emit("maintenance.done", kv_before=before, kv_after=after)
    kv = [f"{v:,}" if v is not None else "unknown" for v in (before, after)]  # "unknown": a phrase
    reason = "first generation ok"
    c.alert_kind("info", "maintenance.done", old, State.RUNNING, reason, before=kv[0], after=kv[1])

"""Operator commands (start, stop, restart, maintenance, reset) and the drain a restart or a maintenance
begins with."""

from __future__ import annotations

from supervisor.core.actions import PollDrain, ReleaseSlot
from supervisor.core.events import DrainProgress, ResetRequested
from supervisor.core.machine import notices, winddown
from supervisor.core.machine.builder import Step
from supervisor.core.machine.retry import BREAKER_MSG
from supervisor.core.states import LAUNCH_STATES, State
from supervisor.core.vocab import Intent, Pending


def on_start(c: Step) -> None:
    """``start``: intent RUN; from STOPPED/BACKOFF go to PREFLIGHT now."""
    st = c.s.state
    if st == State.FATAL or (st == State.STOPPED and c.s.breaker.is_open(c.now)):
        c.reply(False, BREAKER_MSG)
        return
    c.set(intent=Intent.RUN)
    if st in (State.STOPPED, State.BACKOFF):
        # STOPPED/BACKOFF -> PREFLIGHT
        c.preflight("operator start")
        c.reply(True, "starting")
    elif st in LAUNCH_STATES:
        c.reply(True, "already starting")
    elif st == State.STOPPING:
        c.reply(True, "will start again once the stop completes")
    elif st in (State.DRAINING, State.MAINTENANCE):
        c.reply(True, "restart in progress")
    else:
        c.reply(True, "already running")


def on_stop(c: Step) -> None:
    """``stop``: intent STOP (persisted); stop the container if up."""
    st = c.s.state
    c.set(intent=Intent.STOP)
    if st == State.STOPPED:
        c.reply(True, "already stopped")
    elif st == State.FATAL:
        # FATAL stays FATAL (breaker open) but stops re-alerting
        c.reply(True, "stopped (circuit breaker still open)")
    elif st in (State.PREFLIGHT, State.WAITING, State.BACKOFF):
        # PREFLIGHT/WAITING/BACKOFF -> STOPPED
        if st == State.WAITING and not c.s.slot_held:
            c.do(ReleaseSlot())  # cancel the pending slot request
        c.release_slot()
        c.to(State.STOPPED, "operator stop")
        c.reply(True, "stopped")
    elif st == State.STOPPING:
        c.reply(True, "stopping")
    else:
        # STARTING/RUNNING/DEGRADED/DRAINING/MAINTENANCE -> STOPPING
        pending = Pending.FAILED_START if c.s.pending == Pending.FAILED_START else Pending.STOP
        notices.maintenance_cancelled(c, "operator stop")  # a stop cancels a maintenance restart
        c.stop("operator_stop", pending)
        c.reply(True, "stopping")


def on_restart(c: Step, maintenance: bool = False) -> None:
    """``restart`` / ``maintenance``: drain, stop, start again (not a breaker failure)."""
    st = c.s.state
    word = Pending.MAINTENANCE if maintenance else Pending.RESTART
    if not maintenance and (st == State.DEGRADED or (st == State.RUNNING and winddown.looks_frozen(c))):
        # DEGRADED/frozen -> STOPPING (restart): a drain waits for requests a sick engine may never finish
        c.set(intent=Intent.RUN)
        c.emit("drain.skipped", state=st.value, failures=c.s.consecutive_failures)
        c.stop("restart", Pending.RESTART)
        c.reply(True, "restarting (no drain: the engine is not healthy)")
        return
    if st in (State.RUNNING, State.DEGRADED):
        # RUNNING/DEGRADED -> DRAINING | MAINTENANCE
        p = c.policy
        c.set(
            intent=Intent.RUN,
            pending=word,
            maintenance_run=maintenance,
            maintenance_kv_before=c.s.kv.tokens if maintenance else None,
            drain_deadline=c.now + p.drain_s(maintenance),
            next_drain_poll_at=c.now + p.drain_poll_s,
        )
        c.do(PollDrain())
        c.to(State.MAINTENANCE if maintenance else State.DRAINING, f"operator {word}")
        if maintenance:
            notices.maintenance_started(c, st)
        c.reply(True, "draining")
        return
    if maintenance:
        c.reply(False, f"not serving ({st.value}): maintenance skipped")
        return
    if st == State.STARTING:
        # STARTING -> STOPPING (restart)
        c.set(intent=Intent.RUN)
        c.stop("restart", Pending.RESTART)
        c.reply(True, "restarting")
    elif st in (State.STOPPED, State.BACKOFF, State.FATAL):
        on_start(c)
    elif st in (State.PREFLIGHT, State.WAITING):
        c.reply(True, "already starting")
    else:
        c.reply(True, f"{st.value.lower()} in progress")


def on_reset(c: Step, ev: ResetRequested) -> None:
    """``reset``: close the breaker; FATAL -> PREFLIGHT (intent RUN) or STOPPED. Says who reset it."""
    old = c.s.state
    had = bool(c.s.breaker.failures) or c.s.breaker.tripped_at is not None
    c.set(breaker=c.s.breaker.reset(), fatal_alerted_at=None, last_cause=None, last_death=None)
    if had or old == State.FATAL:
        c.emit("breaker.reset", reason="operator", uid=ev.uid, user=ev.user)
    if old != State.FATAL:
        c.reply(True, "breaker closed")
    else:
        c.set(backoff=c.s.backoff.reset())
        if c.s.intent == Intent.RUN:
            # FATAL -> PREFLIGHT
            c.preflight("breaker reset")
            c.reply(True, "breaker reset: starting")
        else:
            # FATAL -> STOPPED
            c.to(State.STOPPED, "breaker reset")
            c.reply(True, "breaker reset: stopped (manual stop)")
    if had or old == State.FATAL:
        notices.breaker_reset(c, old, ev.who(), "operator reset")


# --- draining ----------------------------------------------------------------------------------------------


def tick_draining(c: Step) -> None:
    """DRAINING/MAINTENANCE on Tick: poll the drain, stop at the drain timeout; probe rounds go on."""
    p = c.policy
    drain_s = p.drain_s(c.s.state == State.MAINTENANCE)
    deadline = c.s.drain_deadline if c.s.drain_deadline is not None else c.now
    deadline = min(deadline, c.now + drain_s)
    nxt = c.s.next_drain_poll_at if c.s.next_drain_poll_at is not None else c.now
    nxt = min(nxt, c.now + p.drain_poll_s)
    c.set(drain_deadline=deadline, next_drain_poll_at=nxt)
    if c.now >= deadline:
        # DRAINING/MAINTENANCE -> STOPPING
        c.emit("drain.timeout", drain_s=drain_s)
        c.stop(c.s.pending or Pending.RESTART, c.s.pending or Pending.RESTART)
        return
    if c.now >= nxt:
        c.set(next_drain_poll_at=c.now + p.drain_poll_s)
        c.do(PollDrain())
    winddown.tick(c, generation=True)


def on_drain_progress(c: Step, ev: DrainProgress) -> None:
    """DRAINING/MAINTENANCE: stop as soon as no request runs (unknown: keep waiting until the timeout)."""
    if ev.requests_running is not None and ev.requests_running <= 0:
        # DRAINING/MAINTENANCE -> STOPPING
        c.emit("drain.done")
        c.stop(c.s.pending or Pending.RESTART, c.s.pending or Pending.RESTART)

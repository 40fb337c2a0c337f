"""Operator commands, draining, stops and exits, daemon start and adoption, BACKOFF/FATAL timers."""

from __future__ import annotations

from supervisor.core.actions import (
    CheckExternalStop,
    ObserveContainer,
    PollDrain,
    ReadKvBaseline,
    ReleaseSlot,
    StopContainer,
)
from supervisor.core.events import (
    ContainerExited,
    ContainerObserved,
    DaemonStarted,
    DrainProgress,
    ObserveFailed,
    ResetRequested,
)
from supervisor.core.machine import kill, notices, watch
from supervisor.core.machine.builder import Step
from supervisor.core.machine.diagnosed import diagnosis_pending
from supervisor.core.machine.start import adopt, start_failed_now
from supervisor.core.states import CONTAINER_STATES, LAUNCH_STATES, State
from supervisor.core.vocab import Intent, Outcome, Pending

_BREAKER_MSG = "circuit breaker open: run reset"
#: StopContainer reason for a stray container (the effect never answers it with ContainerStopped).
UNWANTED = "unwanted"
#: Kill signals of a ``docker stop`` / Ctrl-C (a SIGKILL, an OOM kill or a crash is a failure instead).
STOP_SIGNALS = frozenset({"15", "SIGTERM", "2", "SIGINT"})
#: Stops with nothing to save: SIGTERM, then SIGKILL after the emergency grace (Policy.urgent_grace_s).
_URGENT = frozenset({"emergency", "failed_start"})
#: Docker not answering is reported at most this often while the container is still unobserved.
OBSERVE_REPORT_EVERY_S = 60.0


# --- operator ----------------------------------------------------------------------------------


def on_start(c: Step) -> None:
    """``start``: intent RUN; from STOPPED/BACKOFF go to PREFLIGHT now."""
    st = c.s.state
    if st == State.FATAL or (st == State.STOPPED and c.s.breaker.is_open(c.now)):
        c.reply(False, _BREAKER_MSG)
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
    if not maintenance and (st == State.DEGRADED or (st == State.RUNNING and watch.looks_frozen(c))):
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
            maintenance_kv_before=c.s.kv_tokens if maintenance else None,
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


# --- draining ----------------------------------------------------------------------------------


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
    watch.tick(c, generation=True)


def on_drain_progress(c: Step, ev: DrainProgress) -> None:
    """DRAINING/MAINTENANCE: stop as soon as no request runs (unknown: keep waiting until the timeout)."""
    if ev.requests_running is not None and ev.requests_running <= 0:
        # DRAINING/MAINTENANCE -> STOPPING
        c.emit("drain.done")
        c.stop(c.s.pending or Pending.RESTART, c.s.pending or Pending.RESTART)


# --- stops and exits ---------------------------------------------------------------------------


def _matches(c: Step, container_id: str | None) -> bool:
    """An exit of another (older) container than ours is a late event."""
    return container_id is None or c.s.container_id is None or container_id == c.s.container_id


def on_exited(c: Step, ev: ContainerExited) -> None:
    """The container is gone: requested (STOPPING) or not (a failure, or an external manual stop)."""
    st = c.s.state
    if st == State.STARTING and c.s.container_id is None and not c.s.adopted:
        return  # the exit of an older container: ours has not started yet
    if not _matches(c, ev.container_id):
        return
    fields = {"exit_code": ev.exit_code, "oom_killed": ev.oom_killed, "container_id": c.s.container_id}
    if st == State.STOPPING:
        # STOPPING -> (pending)
        c.emit("container.exited", requested=True, **fields)
        c.stop_completed(f"stopped ({c.s.pending or Pending.STOP})")
        return
    if ev.signal in STOP_SIGNALS:
        # up -> STOPPED: a SIGTERM we did not send: a human's `docker stop` -- or dockerd stopping every
        # container on its way down (an engine restart or upgrade). Held as a manual stop while a job asks
        # Docker which it was (ExternalStopChecked); only then the event and the alert.
        c.emit("container.stop_signal", signal=ev.signal, **fields)
        if st == State.STARTING and not c.s.adopted:
            c.record_start(Outcome.STOPPED)
        c.release_slot()
        c.set(
            intent=Intent.STOP, container_id=None, pending=None, adopted=False, external_stop_unconfirmed=True
        )
        c.to(State.STOPPED, "stopped externally")
        notices.maintenance_cancelled(c, "container stopped from outside")
        c.do(CheckExternalStop())
        return
    c.emit("container.exited", requested=False, kernel=list(c.kernel_seen()), **fields)
    if st == State.STARTING:
        # STARTING -> BACKOFF | FATAL
        outcome = c.s.load.failure_outcome or ("failed_oom_killed" if ev.oom_killed else "failed_exit")
        start_failed_now(c, outcome, f"container exited during start (code {ev.exit_code})")
        return
    if st in (State.DRAINING, State.MAINTENANCE):
        # DRAINING/MAINTENANCE -> PREFLIGHT: it went down before we stopped it; carry on with the restart
        c.set(pending=c.s.pending or Pending.RESTART)
        c.stop_completed(f"exited while draining (code {ev.exit_code})")
        return
    # RUNNING/DEGRADED -> BACKOFF | FATAL: whatever the exit code (vLLM exits 0 when its engine dies)
    old = c.s.state
    c.set(emergencies=c.s.emergencies + 1)
    reason = f"container exited (code {ev.exit_code}{', OOM killed' if ev.oom_killed else ''})"
    reason += c.kernel_suffix()
    c.fail(reason, None)
    c.alert_kind("critical", "container.died", old, c.s.state, reason)


def on_stopped(c: Step) -> None:
    """STOPPING: the stop action completed (the exit event may come before or after)."""
    c.emit("container.stopped", container_id=c.s.container_id, reason=c.s.pending)
    c.stop_completed(f"stopped ({c.s.pending or Pending.STOP})")


def tick_stopping(c: Step) -> None:
    """STOPPING on Tick: a stop that neither completed nor failed in time is re-issued as a kill; probe
    rounds (no generation) go on."""
    p = c.policy
    watch.tick(c, generation=False)
    deadline = c.s.stop_deadline
    cap = c.now + p.stop_grace_s + p.stop_overdue_s
    if deadline is None or deadline > cap:
        c.set(stop_deadline=cap)
        return
    if c.now >= deadline:
        c.emit("stop.overdue", reason=c.s.pending)
        c.do(
            StopContainer(
                grace_s=0.0, reason=f"{c.s.pending or Pending.STOP}_overdue", container_id=c.s.container_id
            )
        )
        c.set(stop_deadline=c.now + p.stop_overdue_s)


def on_unwanted_container(c: Step, container_id: str) -> None:
    """A container came up when none is wanted (a late create): stop it."""
    c.emit("container.unwanted", container_id=container_id, state=c.s.state.value)
    c.do(StopContainer(grace_s=c.policy.stop_grace_s, reason=UNWANTED, container_id=container_id))


# --- daemon start and adoption -----------------------------------------------------------------


def on_daemon_started(c: Step, ev: DaemonStarted) -> None:
    """The daemon (re)started: nothing is held any more; re-arm the breaker after a reboot if allowed."""
    c.set(booting=True, slot_held=False, observe_failed_at=None)
    c.do(ObserveContainer())
    # the baseline of the persisted start (its own ledger row, if written, is not part of it)
    c.do(ReadKvBaseline(c.s.kv_fingerprint, exclude=c.s.container_id))
    if ev.boot_changed and c.policy.reboot_rearms_breaker:
        b = c.s.breaker
        if b.failures or b.tripped_at is not None:
            c.set(breaker=b.reset())
            c.emit("breaker.reset", reason="reboot")
            notices.breaker_reset(c, c.s.state, "a host reboot", "reboot_rearms_breaker")
    if ev.wedged_at is not None:
        kill.on_wedged(c, ev.wedged_at)  # after the re-arm: the wedge counts against the breaker


def on_observed(c: Step, ev: ContainerObserved) -> None:
    """The profile's container as found: adopt, leave alone, or start over (never bounce a live one)."""
    if not c.s.booting:
        # after an error: only a vanished container matters
        if c.s.state in CONTAINER_STATES and not ev.running and _matches(c, ev.container_id):
            on_exited(c, ContainerExited(exit_code=ev.exit_code, signal=None, oom_killed=False))
        return
    c.set(booting=False, observe_failed_at=None)
    st = c.s.state
    if st == State.STOPPING and _resume_stop(c, ev):
        return
    if c.s.intent == Intent.STOP:
        # * -> STOPPED (manual stop survives daemon restarts and reboots)
        if ev.running and ev.container_id is not None:
            c.emit("adopt.skipped_manual_stop", container_id=ev.container_id)
        c.set(container_id=None, pending=None, adopted=False)
        if st != State.STOPPED:
            c.to(State.STOPPED, "manual stop (persisted)")
        return
    if c.s.breaker.is_open(c.now):
        # * -> FATAL
        if ev.running and ev.container_id is not None:
            c.emit("adopt.skipped_breaker_open", container_id=ev.container_id)
        old = st
        if st != State.FATAL:
            c.to(State.FATAL, "circuit breaker open (persisted)")
        c.set(fatal_alerted_at=c.now)
        c.alert_kind("critical", "breaker.open_at_start", old, State.FATAL, _BREAKER_MSG)
        return
    if ev.running and ev.container_id is not None:
        # * -> STARTING (adopted)
        adopt(c, ev.container_id)
        if ev.restart_policy not in ("no", ""):
            notices.restart_policy(c, st, ev.container_id, ev.restart_policy)
        return
    retry_at = c.s.backoff.retry_at
    if st == State.BACKOFF and retry_at is not None and retry_at > c.now:
        # BACKOFF stays BACKOFF (capped against a backwards clock)
        c.set(backoff=type(c.s.backoff)(c.s.backoff.attempt, min(retry_at, c.now + c.policy.backoff_max_s)))
        return
    # * -> PREFLIGHT
    if st in CONTAINER_STATES:
        c.emit("adopt.container_gone", previous_state=st.value, exit_code=ev.exit_code)
    c.set(container_id=None)
    c.preflight("daemon start")


def on_observe_failed(c: Step, ev: ObserveFailed) -> None:
    """Docker did not answer the look at the container: decide nothing (not "no container", not a
    failure); report it at most once a minute. The next Tick looks again."""
    last = c.s.observe_failed_at
    if last is None or last > c.now or c.now - last >= OBSERVE_REPORT_EVERY_S:
        c.set(observe_failed_at=c.now)
        c.emit("docker.unreachable", error=ev.error)


def _resume_stop(c: Step, ev: ContainerObserved) -> bool:
    """A persisted STOPPING: the previous daemon died mid-stop. Finish it; True if handled.

    Still up (same container): stop it again (an operator stop stays a stop, an emergency stays an
    emergency). Gone: complete the stop as if its exit had been seen (a failure reaches the breaker).
    """
    if ev.running and ev.container_id is not None and _matches(c, ev.container_id):
        # STOPPING stays STOPPING: re-issue the interrupted stop
        c.set(container_id=ev.container_id)
        c.emit("stop.resumed", container_id=ev.container_id, reason=c.s.pending)
        pending = c.s.pending or Pending.STOP
        c.stop(pending, pending, grace_s=c.policy.urgent_grace_s() if pending in _URGENT else None)
        return True
    if not ev.running:
        # STOPPING -> (pending): the container went down while no daemon was watching
        c.emit("container.exited", requested=True, exit_code=ev.exit_code, container_id=c.s.container_id)
        c.stop_completed(f"stopped ({c.s.pending or Pending.STOP}, while the daemon was down)")
        return True
    return False  # another container runs under the name: decide as for any daemon start


# --- timers ------------------------------------------------------------------------------------


def tick_backoff(c: Step) -> None:
    """BACKOFF on Tick: at retry_at, re-check everything (PREFLIGHT), never relaunch blindly; not before
    the diagnosis of the failed start that led here (machine/diagnosed.py)."""
    retry_at = c.s.backoff.retry_at
    cap = c.now + c.policy.backoff_max_s
    if retry_at is not None and retry_at > cap:  # the wall clock jumped backwards
        c.set(backoff=type(c.s.backoff)(c.s.backoff.attempt, cap))
        return
    if diagnosis_pending(c):
        return  # BACKOFF stays BACKOFF: the failed start's diagnosis may still prove a configuration error
    if c.s.intent == Intent.RUN and (retry_at is None or c.now >= retry_at):
        # BACKOFF -> PREFLIGHT
        c.emit("backoff.retry", attempt=c.s.backoff.attempt)
        c.preflight("backoff elapsed")


def tick_fatal(c: Step) -> None:
    """FATAL on Tick: re-alert every fatal_realert_s while the operator still wants it running."""
    last = c.s.fatal_alerted_at
    if last is None or last > c.now:
        c.set(fatal_alerted_at=c.now)
        return
    if c.s.intent == Intent.RUN and c.now - last >= c.policy.fatal_realert_s:
        c.set(fatal_alerted_at=c.now)
        c.emit("breaker.still_open", since=c.s.since)
        c.alert_kind("critical", "breaker.still_open", State.FATAL, State.FATAL, _BREAKER_MSG)

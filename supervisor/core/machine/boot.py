"""Daemon start and adoption: nothing is held after a restart; the profile's container as found is adopted,
left alone or started over (never bounced); a stop the previous daemon left half done is finished."""

from __future__ import annotations

from supervisor.core.actions import ObserveContainer, ReadKvBaseline
from supervisor.core.events import ContainerExited, ContainerObserved, DaemonStarted, ObserveFailed
from supervisor.core.machine import kill, notices
from supervisor.core.machine.builder import Step
from supervisor.core.machine.exits import URGENT, matches, on_exited
from supervisor.core.machine.retry import BREAKER_MSG
from supervisor.core.machine.start import adopt
from supervisor.core.states import CONTAINER_STATES, State
from supervisor.core.vocab import Intent, Pending

#: Docker not answering is reported at most this often while the container is still unobserved.
OBSERVE_REPORT_EVERY_S = 60.0


def on_daemon_started(c: Step, ev: DaemonStarted) -> None:
    """The daemon (re)started: nothing is held any more; re-arm the breaker after a reboot if allowed."""
    # rounds: this daemon's; what the last daemon's watch saw (Docker, outside signals) is not known now
    c.set(
        booting=True,
        slot_held=False,
        observe_failed_at=None,
        probe_rounds=0,
        outside_signal_at=None,
        docker_lost_at=None,
    )
    c.do(ObserveContainer())
    # the baseline of the persisted start (its own ledger row, if written, is not part of it)
    c.do(ReadKvBaseline(c.s.kv.fingerprint, exclude=c.s.container_id))
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
        if c.s.state in CONTAINER_STATES and not ev.running and matches(c, ev.container_id):
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
        c.alert_kind("critical", "breaker.open_at_start", old, State.FATAL, BREAKER_MSG)
        return
    if ev.running and ev.container_id is not None:
        # * -> STARTING (adopted)
        adopt(c, ev.container_id)
        if ev.restart_policy not in ("no", ""):
            _restart_policy(c, st, ev.container_id, ev.restart_policy)
        return
    retry_at = c.s.backoff.retry_at
    if st == State.BACKOFF and retry_at is not None and retry_at > c.now:
        # BACKOFF stays BACKOFF (capped against a backwards clock)
        c.set(backoff=type(c.s.backoff)(c.s.backoff.attempt, min(retry_at, c.now + c.policy.backoff.max_s)))
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
    if ev.running and ev.container_id is not None and matches(c, ev.container_id):
        # STOPPING stays STOPPING: re-issue the interrupted stop
        c.set(container_id=ev.container_id)
        c.emit("stop.resumed", container_id=ev.container_id, reason=c.s.pending)
        pending = c.s.pending or Pending.STOP
        c.stop(pending, pending, grace_s=c.policy.urgent_grace_s() if pending in URGENT else None)
        return True
    if not ev.running:
        # STOPPING -> (pending): the container went down while no daemon was watching
        c.emit("container.exited", requested=True, exit_code=ev.exit_code, container_id=c.s.container_id)
        c.stop_completed(f"stopped ({c.s.pending or Pending.STOP}, while the daemon was down)")
        return True
    return False  # another container runs under the name: decide as for any daemon start


def _restart_policy(c: Step, old: State, container_id: str, policy: str) -> None:
    """An adopted container Docker restarts too: two restarters fight over one model (docker update)."""
    c.emit("adopt.restart_policy", container_id=container_id, policy=policy)
    why = "Docker restarts this container by itself too: set its restart policy to no"
    short = container_id[:12]
    c.alert_kind("warning", "adopt.restart_policy", old, State.STARTING, why, policy=policy, container=short)

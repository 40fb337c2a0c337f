"""Stops and exits: the container gone (asked for or not), a stop that did not finish in time, a container
nobody wants."""

from __future__ import annotations

from supervisor.core.actions import CheckExternalStop, StopContainer
from supervisor.core.events import ContainerExited
from supervisor.core.machine import notices, winddown
from supervisor.core.machine.builder import Step
from supervisor.core.machine.start import start_failed_now
from supervisor.core.states import State
from supervisor.core.vocab import UNWANTED, Intent, Outcome, Pending

#: Kill signals of a ``docker stop`` / Ctrl-C (a SIGKILL, an OOM kill or a crash is a failure instead).
STOP_SIGNALS = frozenset({"15", "SIGTERM", "2", "SIGINT"})
#: Stops with nothing to save: SIGTERM, then SIGKILL after the emergency grace (Policy.urgent_grace_s).
URGENT = frozenset({Pending.EMERGENCY, Pending.FAILED_START})


def matches(c: Step, container_id: str | None) -> bool:
    """An exit of another (older) container than ours is a late event."""
    return container_id is None or c.s.container_id is None or container_id == c.s.container_id


def on_exited(c: Step, ev: ContainerExited) -> None:
    """The container is gone: requested (STOPPING) or not (a failure, or an external manual stop)."""
    st = c.s.state
    if st == State.STARTING and c.s.container_id is None and not c.s.adopted:
        return  # the exit of an older container: ours has not started yet
    if not matches(c, ev.container_id):
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
        exit_outcome = Outcome.FAILED_OOM_KILLED if ev.oom_killed else Outcome.FAILED_EXIT
        outcome = c.s.load.failure_outcome or exit_outcome
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
    winddown.tick(c, generation=False)
    deadline = c.s.stop_deadline
    cap = c.now + p.stop.grace_s + p.stop_overdue_s
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
    """A container came up when none is wanted (a late create): stop it with the emergency grace. It serves
    nobody, so there is nothing to drain, and it is a load that goes on allocating through a planned grace
    (120 s in the shipped profiles): the memory guard that tripped before it existed, seen in the fault
    matrix on a loaded box, would have waited that long (2026-12-05)."""
    c.emit("container.unwanted", container_id=container_id, state=c.s.state.value)
    c.do(StopContainer(grace_s=c.policy.urgent_grace_s(), reason=UNWANTED, container_id=container_id))

"""The no-grace path: a kernel memory error or the hard memory floor SIGKILLs the container at once.

On unified memory the host freezes a few seconds after memory runs out (docs/field-notes.md,
docs/wedge.md): a SIGTERM grace would outlast the host. The transition is the ordinary one (STARTING ->
a failed start, serving -> an emergency, both through STOPPING to the breaker and BACKOFF/FATAL), only
the stop is a :class:`~supervisor.core.actions.KillContainer` instead of a graceful stop. A profile
already STOPPING (a graceful stop under way) gets the kill too and keeps what it was stopping for.
"""

from __future__ import annotations

from supervisor.core.actions import KillContainer, StopContainer
from supervisor.core.host_events import HardFloor
from supervisor.core.machine import probe, start
from supervisor.core.machine.builder import Step
from supervisor.core.states import CONTAINER_STATES, DRAIN_STATES, SERVING_STATES, State
from supervisor.core.vocab import Outcome


def kill_now(c: Step, reason: str, cause: str, outcome: str, **fields: object) -> None:
    """SIGKILL the profile's container now (``cause``: kernel | memory_floor); no-op without one."""
    st = c.s.state
    if st not in CONTAINER_STATES:
        return
    mark = len(c.actions)
    c.emit(
        "emergency.kill", cause=cause, reason=reason, state=st.value, container_id=c.s.container_id, **fields
    )
    if st == State.STARTING:
        # STARTING -> STOPPING (failed_start): the load would wedge the host
        start.start_failed_stop(c, outcome, f"{cause}: killed at once", reason)
        c.alert_kind("critical", "emergency.stop", st, State.STOPPING, reason)  # now, not after the exit
    elif st in SERVING_STATES | DRAIN_STATES:
        # RUNNING/DEGRADED/DRAINING/MAINTENANCE -> STOPPING (emergency)
        probe.emergency(c, reason)
    # else STOPPING stays STOPPING: a graceful stop under way becomes a kill
    _as_kill(c, mark, reason)


def _as_kill(c: Step, mark: int, reason: str) -> None:
    """Every graceful stop asked for since ``mark`` becomes a kill (one kill at least)."""
    cid = c.s.container_id
    kept = [a for a in c.actions[mark:] if not isinstance(a, StopContainer)]
    c.actions[mark:] = [*kept, KillContainer(reason=reason[:300], container_id=cid)]
    c.set(stop_deadline=c.now + c.policy.stop_overdue_s)


def on_hard_floor(c: Step, ev: HardFloor) -> None:
    """Host memory below the hard floor: kill at once, in any state with a container."""
    if c.s.state not in CONTAINER_STATES:
        return
    c.emit("memory.hard_floor", detail=ev.detail)
    kill_now(c, f"memory hard floor: {ev.detail}", "memory_floor", Outcome.FAILED_MEMORY_GUARD)


def on_wedged(c: Step, at: float) -> None:
    """Daemon start after a hard reboot: a run that was up when the host went down ended there. One
    ledger row (``wedged``: ``supervisorctl history``) and one breaker record, at about when it happened;
    the look at the container that follows starts it over (or FATAL when the breaker is open now)."""
    st = c.s.state
    if st not in CONTAINER_STATES or c.s.container_id is None:
        return
    c.emit("run.wedged", at=at, state=st.value, container_id=c.s.container_id)
    c.record_start(Outcome.WEDGED)
    c.breaker_now()
    c.set(breaker=c.s.breaker.record(min(at, c.now)), emergencies=c.s.emergencies + 1)

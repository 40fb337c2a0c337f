"""Seats: another profile of this profile's seat is being started, so this one makes way.

Profiles of one ``seat`` share a port and a GPU: never two of them load or serve at once. The fleet
rule (:func:`supervisor.core.fleet.rules.seat_handover`) picks whom to tell; this profile drains what it
serves, stops, and stays stopped (intent stop: it does not come back by itself).
"""

from __future__ import annotations

from supervisor.core.actions import Emit, PollDrain, ReleaseSlot
from supervisor.core.events import HandoverRequested
from supervisor.core.machine import notices
from supervisor.core.machine.builder import Step
from supervisor.core.states import DRAIN_STATES, SERVING_STATES, State
from supervisor.core.vocab import Intent, Pending


def on_handover(c: Step, ev: HandoverRequested) -> None:
    """Make way for profile ``ev.to``: drain and stop (serving), stop (loading), or just stay stopped."""
    st = c.s.state
    c.do(Emit("seat.handover", {"from": c.s.name, "to": ev.to, "state": st.value}))
    c.set(intent=Intent.STOP)
    reason = f"seat handover to {ev.to}"
    if st in SERVING_STATES:
        # RUNNING/DEGRADED -> DRAINING (pending stop): the requests in flight finish first
        p = c.policy
        c.set(
            pending=Pending.STOP,
            drain_deadline=c.now + p.stop.drain_timeout_s,
            next_drain_poll_at=c.now + p.drain_poll_s,
            next_probe_at=None,
        )
        c.do(PollDrain())
        c.to(State.DRAINING, reason)
    elif st in DRAIN_STATES:
        # DRAINING/MAINTENANCE stays: the drain ends in a stop, and no start follows it
        c.set(pending=Pending.STOP)
        notices.maintenance_cancelled(c, reason)
    elif st == State.STARTING:
        # STARTING -> STOPPING (a load is cut short; a failing one still counts as failed)
        c.stop("seat_handover", Pending.FAILED_START if c.s.pending == Pending.FAILED_START else Pending.STOP)
    elif st in (State.PREFLIGHT, State.WAITING, State.BACKOFF):
        # PREFLIGHT/WAITING/BACKOFF -> STOPPED: nothing was created yet
        if st == State.WAITING and not c.s.slot_held:
            c.do(ReleaseSlot())  # cancel the pending slot request
        c.release_slot()
        c.to(State.STOPPED, reason)
    # STOPPING completes into STOPPED (intent stop); STOPPED and FATAL stay

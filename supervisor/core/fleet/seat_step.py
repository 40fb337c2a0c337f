"""The seats' side of the fleet step (pure; rules in :mod:`supervisor.core.fleet.seats`): starts held while
a seat-mate is up, and claims (profiles started on purpose) whose seat-mates must make way.

A start is held at its first step that would touch the host: the preflight, and, as a guard, the load
slot (after which the host is settled: caches dropped, memory waited for). The machine stays in
PREFLIGHT (nothing is timed there) or WAITING (it asks for the slot again every tick) until the seat is
free; a held preflight is run on the first tick the seat is free. A handover is posted to the seat-mate's
queue like any event (``HandoverRequested``), once per claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from supervisor.core import actions as A, events as E
from supervisor.core.fleet.actions import FleetAction, Post, Record, Run
from supervisor.core.fleet.events import Claimed, Stepped
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.seats import SeatMember, seat_blockers, seat_handover, seat_pending
from supervisor.core.fleet.state import FleetState
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vocab import Intent

#: Operator commands that start a profile on purpose: its seat-mates make way.
CLAIMING_EVENTS = (E.StartRequested, E.RestartRequested, E.ResetRequested)
States = Mapping[str, ProfileState]


def _members(profiles: States, seats: Mapping[str, str | None]) -> dict[str, SeatMember]:
    return {
        n: SeatMember(seats.get(n), s.state, s.intent, s.booting) for n, s in profiles.items() if n in seats
    }


def claimed(fleet: FleetState, ev: Claimed, policy: FleetPolicy) -> FleetState:
    """``ev.profile`` is being started on purpose (an autostart new to this state directory)."""
    if dict(policy.seats).get(ev.profile) is None:
        return fleet
    return replace(fleet, claims={**fleet.claims, ev.profile: frozenset()})


def stepped(
    fleet: FleetState, ev: Stepped, profiles: States, policy: FleetPolicy
) -> tuple[FleetState, list[FleetAction]]:
    """A profile's machine stepped (its new snapshot is in ``profiles``): each of its actions is run unless
    a seat-mate is still up (a held preflight is remembered: ``seat.waiting``); an operator start heading
    for RUNNING claims its seat; then every handover due now is posted."""
    seats, name = dict(policy.seats), ev.profile
    members, held, out = _members(profiles, seats), dict(fleet.held), list[FleetAction]()
    for action in ev.actions:
        blockers: tuple[str, ...] = ()
        if isinstance(action, A.RunPreflight | A.AcquireSlot) and seats.get(name) is not None:
            blockers = seat_blockers(name, members)
        if not blockers:
            out.append(Run(name, action))
        elif isinstance(action, A.RunPreflight):  # a held slot request is simply asked again by WAITING
            held[name] = (profiles[name].start_attempts, blockers)
            out.append(Record(name, "seat.waiting", {"for": list(blockers)}))
    fleet = replace(fleet, held=held)
    new = profiles.get(name)
    starting = new is not None and new.intent == Intent.RUN and new.state not in (State.STOPPED, State.FATAL)
    if isinstance(ev.event, CLAIMING_EVENTS) and starting:
        fleet = claimed(fleet, Claimed(name), policy)
    fleet, handovers = _handovers(fleet, profiles, members)
    return fleet, out + handovers


def _handovers(
    fleet: FleetState, profiles: States, members: Mapping[str, SeatMember]
) -> tuple[FleetState, list[FleetAction]]:
    """(profile to make way, claimant) pairs not told yet, posted; claims with nothing left are closed."""
    claims, out = dict(fleet.claims), list[FleetAction]()
    for claimant, told in sorted(fleet.claims.items()):
        s = profiles.get(claimant)
        if s is None or s.intent != Intent.RUN:
            del claims[claimant]
            continue
        new = [t for t in seat_handover(claimant, members) if t not in told]
        claims[claimant] = told | frozenset(new)
        out += [Post(t, E.HandoverRequested(claimant)) for t in new]
        if not seat_pending(claimant, members):
            del claims[claimant]
    return replace(fleet, claims=claims), out


def released(
    fleet: FleetState, profiles: States, policy: FleetPolicy
) -> tuple[FleetState, list[FleetAction]]:
    """Each tick: the held preflights whose seat is free now are run (held ones no longer in that start
    are dropped)."""
    members, held, out = _members(profiles, dict(policy.seats)), dict(fleet.held), list[FleetAction]()
    for name, (attempt, _) in fleet.held.items():
        s = profiles.get(name)
        blockers = seat_blockers(name, members) if s is not None else ()
        if s is None or s.state != State.PREFLIGHT or s.start_attempts != attempt:
            del held[name]
        elif blockers:
            held[name] = (attempt, blockers)
        else:
            del held[name]
            out.append(Run(name, A.RunPreflight()))
    return replace(fleet, held=held), out


def status(fleet: FleetState, profiles: States, policy: FleetPolicy) -> dict[str, dict[str, Any]]:
    """Per profile with a seat: ``{"name": seat, "waiting_for": [...]}`` (for the status document)."""
    seats = dict(policy.seats)
    members, out = _members(profiles, seats), {}
    for name, seat in seats.items():
        if seat is None or name not in profiles:
            continue
        waiting: tuple[str, ...] = ()
        if name in fleet.held:
            waiting = fleet.held[name][1]
        elif profiles[name].state == State.WAITING:
            waiting = seat_blockers(name, members)
        out[name] = {"name": seat, "waiting_for": list(waiting)}
    return out

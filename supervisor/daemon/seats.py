"""The loop's seat bookkeeping: starts held back while another profile of the seat is up, and claims
(profiles started on purpose) whose seat-mates must make way. The rules are the core's
(:func:`~supervisor.core.fleet.seat_blockers`, :func:`~supervisor.core.fleet.seat_handover`).

A start is held at its first step that would touch the host: the preflight (which may drop caches and
wait for memory the other container still holds), and, as a guard, the load slot. The machine stays in
PREFLIGHT (or WAITING, which asks for the slot again every tick) until the seat is free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from supervisor.config import Profile
from supervisor.core import actions as A
from supervisor.core import events as E
from supervisor.core.fleet import SeatMember, seat_blockers, seat_handover, seat_pending
from supervisor.core.profile_state import INTENT_RUN, ProfileState
from supervisor.core.states import State

#: Operator commands that start a profile on purpose: its seat-mates make way.
CLAIMING_EVENTS = (E.StartRequested, E.RestartRequested, E.ResetRequested)


class SeatKeeper:
    """Held starts and open claims of one daemon (loop thread only)."""

    def __init__(self, profiles: Iterable[Profile]) -> None:
        self._seats: dict[str, str | None] = {}
        self._held: dict[str, tuple[int, tuple[str, ...]]] = {}  # profile -> (start attempt, blockers)
        self._claims: set[str] = set()
        self.configure(profiles)

    def configure(self, profiles: Iterable[Profile]) -> None:
        """The profiles' seats (at start and after a reload)."""
        self._seats = {p.name: p.seat for p in profiles}

    def _members(self, states: Mapping[str, ProfileState]) -> dict[str, SeatMember]:
        return {
            n: SeatMember(self._seats.get(n), s.state, s.intent, s.booting)
            for n, s in states.items()
            if n in self._seats
        }

    def claim(self, name: str) -> None:
        """``name`` is being started on purpose (autostart of a profile new to the state directory)."""
        if self._seats.get(name) is not None:
            self._claims.add(name)

    def after_step(self, name: str, event: E.Event, new: ProfileState) -> None:
        """Note an operator start/restart/reset that leaves ``name`` heading for RUNNING."""
        starting = new.intent == INTENT_RUN and new.state not in (State.STOPPED, State.FATAL)
        if isinstance(event, CLAIMING_EVENTS) and starting:
            self.claim(name)

    def hold(self, name: str, action: A.Action, states: Mapping[str, ProfileState]) -> tuple[str, ...]:
        """The seat-mates ``action`` of ``name`` must wait for (empty: run it now).

        A held preflight is remembered and run by :meth:`released` once the seat is free.
        """
        if not isinstance(action, A.RunPreflight | A.AcquireSlot) or self._seats.get(name) is None:
            return ()
        blockers = seat_blockers(name, self._members(states))
        if blockers and isinstance(action, A.RunPreflight):
            self._held[name] = (states[name].start_attempts, blockers)
        return blockers

    def released(self, states: Mapping[str, ProfileState]) -> list[str]:
        """Profiles whose held preflight may run now (held ones no longer in that start are dropped)."""
        out = []
        members = self._members(states)
        for name, (attempt, _) in list(self._held.items()):
            s = states.get(name)
            if s is None or s.state != State.PREFLIGHT or s.start_attempts != attempt:
                del self._held[name]
                continue
            blockers = seat_blockers(name, members)
            if blockers:
                self._held[name] = (attempt, blockers)
            else:
                del self._held[name]
                out.append(name)
        return out

    def handovers(self, states: Mapping[str, ProfileState]) -> list[tuple[str, str]]:
        """(profile to make way, claimant) pairs due now; claims with nothing left to tell are closed."""
        if not self._claims:
            return []
        members = self._members(states)
        out: list[tuple[str, str]] = []
        for claimant in sorted(self._claims):
            s = states.get(claimant)
            if s is None or s.intent != INTENT_RUN:
                self._claims.discard(claimant)
                continue
            out += [(target, claimant) for target in seat_handover(claimant, members)]
            if not seat_pending(claimant, members):
                self._claims.discard(claimant)
        return out

    def status(self, states: Mapping[str, ProfileState]) -> dict[str, dict[str, Any]]:
        """Per profile with a seat: ``{"name": seat, "waiting_for": [...]}`` (for the status document)."""
        out: dict[str, dict[str, Any]] = {}
        members = self._members(states)
        for name, seat in self._seats.items():
            if seat is None or name not in states:
                continue
            waiting: tuple[str, ...] = ()
            if name in self._held:
                waiting = self._held[name][1]
            elif states[name].state == State.WAITING:
                waiting = seat_blockers(name, members)
            out[name] = {"name": seat, "waiting_for": list(waiting)}
        return out

"""The loop's seat bookkeeping: starts held back while another profile of the seat is up, and claims
(profiles started on purpose) whose seat-mates must make way. The rules are the core's
(:func:`~supervisor.core.fleet.seats.seat_blockers`, :func:`~supervisor.core.fleet.seats.seat_handover`).

A start is held at its first step that would touch the host: the preflight, and, as a guard, the load
slot (after which the host is settled: caches dropped, memory waited for). The machine stays in
PREFLIGHT (nothing is timed there) or WAITING (it asks for the slot again every tick) until the seat is
free. A handover is posted to the seat-mate's queue like any event (HandoverRequested), once per claim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from supervisor.config import Profile
from supervisor.core import actions as A, events as E
from supervisor.core.fleet.seats import SeatMember, seat_blockers, seat_handover, seat_pending
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vocab import Intent

#: Operator commands that start a profile on purpose: its seat-mates make way.
CLAIMING_EVENTS = (E.StartRequested, E.RestartRequested, E.ResetRequested)


class _HasState(Protocol):
    state: ProfileState


class _Effects(Protocol):
    """What the keeper needs of the executor: run an action, record a history event."""

    def run(self, name: str, action: A.Action, reply: None) -> None: ...

    @property
    def records(self) -> Any: ...


#: The loop's profiles (each with its current ``state``).
Profiles = Callable[[], Mapping[str, _HasState]]
#: Run one action of the profile just stepped (``Effects.perform``).
Perform = Callable[[A.Action], None]
#: Queue an event for a profile (``Inbox.post``).
Post = Callable[[str, E.Event], None]


class SeatKeeper:
    """Held starts and open claims of one daemon (loop thread only)."""

    def __init__(self, profiles: Iterable[Profile], live: Profiles, effects: _Effects, post: Post) -> None:
        self._live = live
        self._effects = effects
        self._post = post
        self._seats: dict[str, str | None] = {}
        self._held: dict[str, tuple[int, tuple[str, ...]]] = {}  # profile -> (start attempt, blockers)
        self._claims: dict[str, set[str]] = {}  # claimant -> seat-mates already told
        self.configure(profiles)

    def configure(self, profiles: Iterable[Profile]) -> None:
        """The profiles' seats (at start and after a reload)."""
        self._seats = {p.name: p.seat for p in profiles}

    def _states(self) -> dict[str, ProfileState]:
        return {n: p.state for n, p in self._live().items()}

    def _members(self, states: Mapping[str, ProfileState]) -> dict[str, SeatMember]:
        return {
            n: SeatMember(self._seats.get(n), s.state, s.intent, s.booting)
            for n, s in states.items()
            if n in self._seats
        }

    def claim(self, name: str) -> None:
        """``name`` is being started on purpose: its seat-mates that want to run will make way."""
        if self._seats.get(name) is not None:
            self._claims[name] = set()

    def after_step(self, name: str, event: E.Event, new: ProfileState) -> None:
        """After a step of ``name``: an operator start/restart/reset that leaves it heading for RUNNING
        claims its seat; then every handover due now is posted."""
        starting = new.intent == Intent.RUN and new.state not in (State.STOPPED, State.FATAL)
        if isinstance(event, CLAIMING_EVENTS) and starting:
            self.claim(name)
        for target, claimant in self.handovers():
            self._post(target, E.HandoverRequested(claimant))

    def handovers(self) -> list[tuple[str, str]]:
        """(profile to make way, claimant) pairs not told yet; claims with nothing left are closed."""
        if not self._claims:
            return []
        states = self._states()
        members = self._members(states)
        out: list[tuple[str, str]] = []
        for claimant, told in sorted(self._claims.items()):
            s = states.get(claimant)
            if s is None or s.intent != Intent.RUN:
                del self._claims[claimant]
                continue
            new = [t for t in seat_handover(claimant, members) if t not in told]
            told.update(new)
            out += [(t, claimant) for t in new]
            if not seat_pending(claimant, members):
                del self._claims[claimant]
        return out

    def run(
        self, name: str, event: E.Event, new: ProfileState, actions: Iterable[A.Action], perform: Perform
    ) -> None:
        """After a step of ``name``: ``perform`` each action unless :meth:`hold` holds it, then
        :meth:`after_step` (a claim: its seat-mates get a handover)."""
        for action in actions:
            if not self.hold(name, action):
                perform(action)
        self.after_step(name, event, new)

    def hold(self, name: str, action: A.Action) -> bool:
        """Whether ``action`` of ``name`` must wait for a seat-mate to stop.

        A held preflight is remembered (event ``seat.waiting``) and run by :meth:`tick` once the seat is
        free; a held slot request is simply asked again by WAITING on the next tick.
        """
        if not isinstance(action, A.RunPreflight | A.AcquireSlot) or self._seats.get(name) is None:
            return False
        states = self._states()
        blockers = seat_blockers(name, self._members(states))
        if blockers and isinstance(action, A.RunPreflight):
            self._held[name] = (states[name].start_attempts, blockers)
            self._effects.records.emit(name, "seat.waiting", {"for": list(blockers)})
        return bool(blockers)

    def tick(self) -> None:
        """Run the held preflights whose seat is free now."""
        for name in self.released():
            self._effects.run(name, A.RunPreflight(), None)

    def released(self) -> list[str]:
        """Profiles whose held preflight may run now (held ones no longer in that start are dropped)."""
        out = []
        states = self._states()
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

    def status(self) -> dict[str, dict[str, Any]]:
        """Per profile with a seat: ``{"name": seat, "waiting_for": [...]}`` (for the status document)."""
        out: dict[str, dict[str, Any]] = {}
        states = self._states()
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

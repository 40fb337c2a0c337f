"""Seats (pure): profiles that share one port or one GPU; which of them blocks a start, whom a claim tells to
make way (the daemon's seat keeper applies these; core/machine/seat.py is the profile's side)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from supervisor.core.states import CONTAINER_STATES, State
from supervisor.core.vocab import Intent


@dataclass(frozen=True)
class SeatMember:
    """One profile as the seat rules see it: its seat (None: none), state, intent, and whether the
    daemon has looked at its container yet (a booting profile is not told anything until it has)."""

    seat: str | None
    state: State
    intent: str
    booting: bool = False


def seat_blockers(name: str, members: Mapping[str, SeatMember]) -> tuple[str, ...]:
    """The other profiles of ``name``'s seat that have a container up or going (STARTING .. STOPPING).

    ``name`` may not begin a start (preflight, load slot, create) while any is left: one port, one GPU,
    never two containers of a seat at once. Profiles without a seat are never blocked.
    """
    me = members.get(name)
    if me is None or me.seat is None:
        return ()
    return tuple(
        n for n, m in members.items() if n != name and m.seat == me.seat and m.state in CONTAINER_STATES
    )


def seat_handover(claimant: str, members: Mapping[str, SeatMember]) -> tuple[str, ...]:
    """The other profiles of the claimant's seat to be told to make way (drain, stop, intent stop).

    The claimant is being started on purpose (operator start/restart/reset, or autostart of a profile
    new to this state directory): every other member that wants to run (intent run) makes way. One whose
    intent is stop already stops or stays stopped. Members the daemon has not looked at yet (booting) are
    left for later (:func:`seat_pending`).
    """
    me = members.get(claimant)
    if me is None or me.seat is None:
        return ()
    return tuple(
        n
        for n, m in members.items()
        if n != claimant and m.seat == me.seat and not m.booting and m.intent == Intent.RUN
    )


def seat_pending(claimant: str, members: Mapping[str, SeatMember]) -> bool:
    """Whether a claim still has members to tell later (booting ones of the seat that want to run)."""
    me = members.get(claimant)
    if me is None or me.seat is None:
        return False
    return any(
        n != claimant and m.seat == me.seat and m.booting and m.intent == Intent.RUN
        for n, m in members.items()
    )

"""Decisions across profiles (pure): whom the memory guard stops, seats, Docker's health.

The per-profile machine decides for one profile; these few choices need every profile's state at once.
Scheduled maintenance, also a fleet decision, has its own module: :mod:`supervisor.core.maintenance.duty`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from supervisor.core.actions import Alert
from supervisor.core.clock import format_duration
from supervisor.core.states import CONTAINER_STATES, DRAIN_STATES, SERVING_STATES, State
from supervisor.core.vocab import Intent


def memory_guard_targets(states: Mapping[str, State]) -> list[str]:
    """The profiles to stop when the memory guard trips: what is loading, else what serves.

    A load is the likely cause of a sudden memory drop and the cheapest thing to lose; when nothing
    loads, every serving container is stopped (one box, one pool of memory: any of them may hold it).
    A profile already STOPPING is told too: a stop still waiting out a planned grace becomes a kill
    (machine/winddown.py ``escalate``; real vLLM loses a SIGTERM while its engine initialises).
    """
    stopping = [name for name, st in states.items() if st == State.STOPPING]
    loading = [name for name, st in states.items() if st == State.STARTING]
    if loading:
        return loading + stopping
    return [name for name, st in states.items() if st in SERVING_STATES | DRAIN_STATES] + stopping


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


DOCKER_ANSWERING = "answering"
DOCKER_NOT_ANSWERING = "not answering"
DOCKER_UNKNOWN = "unknown"


#: Docker not answering is told in the chat (``docker.down``) once this many pings in a row failed over at
#: least ``DOCKER_DOWN_AFTER_S``: an engine restart of a few seconds is no news (docs/alerts.md).
DOCKER_DOWN_AFTER_PINGS = 2
DOCKER_DOWN_AFTER_S = 6.0


@dataclass(frozen=True)
class DockerHealth:
    """Whether the Docker engine answers its pings, since when, and the last error (a value).

    ``failed_pings``: pings in a row that failed; ``alerted``: docker.down was raised for this outage."""

    state: str = DOCKER_UNKNOWN
    since: float | None = None
    error: str | None = None
    failed_pings: int = 0
    alerted: bool = False

    def observe(self, ok: bool, now: float, error: str | None = None) -> tuple[DockerHealth, bool]:
        """The health after one ping; True when it flipped (worth an event)."""
        state = DOCKER_ANSWERING if ok else DOCKER_NOT_ANSWERING
        failed = 0 if ok else self.failed_pings + 1
        if state == self.state:
            return replace(self, error=None if ok else error, failed_pings=failed), False
        return DockerHealth(state, now, None if ok else error, failed), True

    def down_due(self, now: float) -> bool:
        """Not answering long enough to tell a human, and not told yet for this outage."""
        return (
            self.state == DOCKER_NOT_ANSWERING
            and not self.alerted
            and self.failed_pings >= DOCKER_DOWN_AFTER_PINGS
            and self.since is not None
            and now - self.since >= DOCKER_DOWN_AFTER_S
        )

    def down_alert(self, now: float) -> Alert:
        """``docker.down``: critical (nothing can be started, stopped or watched while it lasts)."""
        silent = format_duration(now - (self.since if self.since is not None else now))
        return Alert(
            "critical",
            "Docker not answering",
            DOCKER_ANSWERING,
            DOCKER_NOT_ANSWERING,
            f"{self.failed_pings} pings in a row failed over {silent}: {self.error or 'no answer'}",
            kind="docker.down",
            params=(("for", silent), ("error", self.error or "no answer")),
        )

    @staticmethod
    def up_alert() -> Alert:
        """``docker.up``: the engine answers again (resolves docker.down)."""
        return Alert(
            "info",
            "Docker answering again",
            DOCKER_NOT_ANSWERING,
            DOCKER_ANSWERING,
            "ping ok",
            kind="docker.up",
        )

    def to_dict(self) -> dict[str, object]:
        """For the status document."""
        return {"state": self.state, "since": self.since, "error": self.error}


@dataclass(frozen=True)
class ReloadPlan:
    """What a reloaded config does to the running fleet: start the added, mark the changed (a drift
    check, never a bounce), leave the removed running unsupervised and report them."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def summary(self) -> str:
        """``added a; changed b; removed c (left running)`` or ``no profile changed``."""
        parts = [f"added {', '.join(self.added)}"] if self.added else []
        parts += [f"changed {', '.join(self.changed)}"] if self.changed else []
        parts += [f"removed {', '.join(self.removed)} (left running)"] if self.removed else []
        return "; ".join(parts) or "no profile changed"


def reload_plan(old: Mapping[str, object], new: Mapping[str, object]) -> ReloadPlan:
    """Compare the profiles by name (values compared with ``==``; order kept as in each config)."""
    return ReloadPlan(
        added=tuple(n for n in new if n not in old),
        removed=tuple(n for n in old if n not in new),
        changed=tuple(n for n in new if n in old and new[n] != old[n]),
    )

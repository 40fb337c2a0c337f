"""Pure decisions for scheduled maintenance: catch-up after downtime, and the one-at-a-time fan-out.

No I/O and no clock reads: the caller passes epoch seconds and state names and applies the decision
(dispatch ``MaintenanceRequested``, record ``maintenance.missed`` / ``maintenance.skipped`` events, alert).
See docs/maintenance.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from supervisor.core.states import SERVING_STATES, State

#: A fire at most this late is on time whatever ``catch_up_s`` is (the daemon loop's period, a busy loop).
ON_TIME_GRACE_S = 60.0
_SERVING = frozenset(s.value for s in SERVING_STATES)
#: After leaving the serving states, these mean the maintenance restart did not bring the profile back.
_GAVE_UP = frozenset({State.BACKOFF.value, State.FATAL.value, State.STOPPED.value})


@dataclass(frozen=True)
class CatchUp:
    """What to do about the fire times since the schedule was last evaluated.

    ``run``: the fire honoured now (start a maintenance round), or None. ``coalesced``: older fires within
    ``catch_up_s`` folded into that one run. ``missed``: fires older than ``catch_up_s`` (one
    ``maintenance.missed`` event each).
    """

    run: float | None = None
    coalesced: tuple[float, ...] = ()
    missed: tuple[float, ...] = ()

    @property
    def kind(self) -> Literal["nothing", "run", "missed"]:
        """``run`` when a round starts now, else ``missed`` when fires were dropped, else ``nothing``."""
        if self.run is not None:
            return "run"
        return "missed" if self.missed else "nothing"


def plan_catch_up(
    last_evaluated: float | None,
    now: float,
    fires: Sequence[float],
    catch_up_s: float,
    grace_s: float = ON_TIME_GRACE_S,
) -> CatchUp:
    """Decide on `fires` (the schedule's fire times in (last_evaluated, now]).

    On the first run (`last_evaluated` None) nothing is caught up. Otherwise the most recent fire at most
    ``max(catch_up_s, grace_s)`` old runs now, once, however many fires were missed; fires older than
    that are missed. Fires outside (last_evaluated, now] are ignored (a clock stepped backwards).
    """
    if last_evaluated is None:
        return CatchUp()
    window = sorted(f for f in fires if last_evaluated < f <= now)
    limit = max(catch_up_s, grace_s)
    fresh = [f for f in window if now - f <= limit]
    missed = tuple(f for f in window if now - f > limit)
    if not fresh:
        return CatchUp(missed=missed)
    return CatchUp(run=fresh[-1], coalesced=tuple(fresh[:-1]), missed=missed)


@dataclass(frozen=True)
class Skipped:
    """A profile that was not serving at its turn: ``maintenance.skipped`` event and a warning alert."""

    name: str
    state: str


@dataclass(frozen=True)
class Finished:
    """A profile whose maintenance turn ended: back serving (``done``) or not coming back (``failed``)."""

    name: str
    outcome: Literal["done", "failed"]
    state: str


@dataclass(frozen=True)
class RoundStep:
    """What the caller does after one :meth:`MaintenanceRound.step`.

    ``start``: dispatch ``MaintenanceRequested`` to this profile now. ``skipped`` / ``finished``: turns that
    ended in this step. ``waiting_for``: the profile whose restart is in progress. ``completed``: the round
    ended in this step. ``ignored_due``: a schedule fire arrived while a round was running (not queued).
    """

    start: str | None = None
    skipped: tuple[Skipped, ...] = ()
    finished: tuple[Finished, ...] = ()
    waiting_for: str | None = None
    completed: bool = False
    ignored_due: bool = False


@dataclass(frozen=True)
class MaintenanceRound:
    """One maintenance round over the profiles in config order, one profile at a time.

    The empty value is idle. ``step`` starts a round when maintenance is due, then hands out one profile
    at a time: the next starts only once the current one is serving again after having left the serving
    states, or has given up (BACKOFF/FATAL/STOPPED). A profile not serving at its turn is skipped.
    """

    queue: tuple[str, ...] = ()
    current: str | None = None
    current_left: bool = False  # the current profile has been seen outside RUNNING/DEGRADED
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    active: bool = False

    def step(self, states: Mapping[str, str], due: bool) -> tuple[MaintenanceRound, RoundStep]:
        """Advance with `states` (profile name -> state name, config order) and the schedule's `due` flag."""
        rnd, ignored = self, False
        if due and not self.active:
            rnd = MaintenanceRound(queue=tuple(states), active=True)
        elif due:
            ignored = True
        if not rnd.active:
            return rnd, RoundStep(ignored_due=ignored)
        finished: tuple[Finished, ...] = ()
        if rnd.current is not None:
            rnd, outcome = rnd._watch(states.get(rnd.current, "absent"))
            if outcome is None:
                return rnd, RoundStep(waiting_for=rnd.current, ignored_due=ignored)
            finished = (outcome,)
        skipped: list[Skipped] = []
        queue = rnd.queue
        while queue:
            name, queue = queue[0], queue[1:]
            state = states.get(name, "absent")
            if state in _SERVING:
                passed = (*rnd.skipped, *(s.name for s in skipped))
                nxt = replace(rnd, queue=queue, current=name, current_left=False, skipped=passed)
                return nxt, RoundStep(
                    start=name,
                    skipped=tuple(skipped),
                    finished=finished,
                    waiting_for=name,
                    ignored_due=ignored,
                )
            skipped.append(Skipped(name, state))
        end = MaintenanceRound(
            done=rnd.done, failed=rnd.failed, skipped=(*rnd.skipped, *(s.name for s in skipped))
        )
        return end, RoundStep(skipped=tuple(skipped), finished=finished, completed=True, ignored_due=ignored)

    def _watch(self, state: str) -> tuple[MaintenanceRound, Finished | None]:
        """Follow the current profile: (new value, its outcome once its turn is over)."""
        name = self.current
        assert name is not None
        if state in _SERVING:
            if not self.current_left:
                return self, None  # the request has not taken effect yet
            return replace(self, current=None, done=(*self.done, name)), Finished(name, "done", state)
        if state in _GAVE_UP or state == "absent":
            return replace(self, current=None, failed=(*self.failed, name)), Finished(name, "failed", state)
        return replace(self, current_left=True), None

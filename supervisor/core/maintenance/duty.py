"""The fleet side of scheduled maintenance (pure): from the schedule's verdict and every profile's state
to the requests the loop dispatches and the events and alerts it records.

The daemon loop calls :meth:`MaintenanceDuty.step` once per tick with the :class:`CatchUp` its schedule
clock decided for that tick (usually "nothing") and every profile's snapshot, keeps the returned duty and
carries out the returned :class:`MaintenanceOrders`. The one-at-a-time round itself is
:class:`~supervisor.core.maintenance.plan.MaintenanceRound`; this module adds what the loop needs around
it: a due round waits while a profile is starting (adoption at daemon start, a load), the events
(``maintenance.due`` / ``missed`` / ``turn`` / ``skipped`` / ``round_completed`` / ``ignored``), the
warning alert of a skipped profile, and a JSON form so a round survives a daemon restart.
See docs/maintenance.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from supervisor.core.actions import Action, Alert, Emit
from supervisor.core.alerts.localize import title_en
from supervisor.core.errors import StateError
from supervisor.core.maintenance.plan import ON_TIME_GRACE_S, CatchUp, MaintenanceRound
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import LAUNCH_STATES

#: A due round waits at most this long for starting profiles (the default startup deadline: by then
#: every start has ended one way or the other); then the round begins and a still-starting profile is
#: skipped at its turn.
SETTLE_MAX_S = 1800.0
#: Daemon-level records (not about one profile) carry this profile name, as ``docker.*`` events do.
DAEMON = ""

Describe = Callable[[float], str]


@dataclass(frozen=True)
class MaintenanceOrders:
    """What the loop does after one step, in this order.

    ``records``: (profile, Emit | Alert) to execute; profile ``""`` is the daemon (Emit only).
    ``requests``: profiles to send ``MaintenanceRequested`` (at most one per step).
    """

    records: tuple[tuple[str, Action], ...] = ()
    requests: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaintenanceDuty:
    """The maintenance round in progress (or held, or none) and the fire it honours."""

    fire: float | None = None  # the schedule fire the current or held round honours
    held_since: float | None = None  # due, waiting for starting profiles to settle
    round: MaintenanceRound = field(default_factory=MaintenanceRound)

    @property
    def busy(self) -> bool:
        """A round is held or running (a new fire is then ignored, not queued)."""
        return self.held_since is not None or self.round.active

    def step(
        self, now: float, states: Mapping[str, ProfileState], plan: CatchUp, describe: Describe
    ) -> tuple[MaintenanceDuty, MaintenanceOrders]:
        """Advance at wall time `now` with every profile's snapshot (config order) and this tick's `plan`."""
        records: list[tuple[str, Action]] = []
        for fire in plan.missed:
            records.append((DAEMON, _emit("maintenance.missed", fire, now, describe)))
        if plan.missed:  # one warning per profile (condition maintenance: the next round's end resolves it)
            when = describe(plan.missed[-1])
            params = (("when", when),)
            reason = f"the maintenance of {when} was missed (the daemon was down or busy past catch_up_s)"
            for name, s in states.items():
                st = s.state.value
                alert = Alert(
                    "warning", title_en("maintenance.missed", params), st, st, reason,
                    kind="maintenance.missed", params=params, condition="maintenance",
                )  # fmt: skip
                records.append((name, alert))
        duty = self
        if plan.run is not None and self.busy:
            records.append((DAEMON, _emit("maintenance.ignored", plan.run, now, describe, why="round busy")))
        elif plan.run is not None:
            due = _emit("maintenance.due", plan.run, now, describe, coalesced=len(plan.coalesced))
            records.append((DAEMON, due))
            duty = MaintenanceDuty(fire=plan.run, held_since=now)
        start_round = False
        if duty.held_since is not None:
            settling = [n for n, s in states.items() if s.booting or s.state in LAUNCH_STATES]
            if settling and now - duty.held_since < SETTLE_MAX_S:
                return duty, MaintenanceOrders(tuple(records))
            start_round = True
            duty = MaintenanceDuty(fire=duty.fire, round=duty.round)
        names = {n: s.state.value for n, s in states.items()}
        rnd, rs = duty.round.step(names, start_round)
        when = describe(duty.fire) if duty.fire is not None else "-"
        for sk in rs.skipped:
            records.append((sk.name, Emit("maintenance.skipped", {"state": sk.state, "fire_local": when})))
            reason = f"{sk.state} at its turn in the maintenance of {when}"
            title = title_en("maintenance.skipped")
            alert = Alert("warning", title, sk.state, sk.state, reason, kind="maintenance.skipped")
            records.append((sk.name, alert))
        requests: tuple[str, ...] = ()
        if rs.start is not None:
            records.append((rs.start, Emit("maintenance.turn", {"fire_local": when})))
            requests = (rs.start,)
        if rs.completed:
            summary = {"fire_local": when, "done": rnd.done, "failed": rnd.failed, "skipped": rnd.skipped}
            records.append((DAEMON, Emit("maintenance.round_completed", dict(summary))))
            return MaintenanceDuty(), MaintenanceOrders(tuple(records), requests)
        return MaintenanceDuty(fire=duty.fire, round=rnd), MaintenanceOrders(tuple(records), requests)

    # --- persistence (the schedule clock keeps it in the state directory) ---------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        rnd = {f.name: getattr(self.round, f.name) for f in fields(MaintenanceRound)}
        return {"fire": self.fire, "held_since": self.held_since, "round": rnd}

    @classmethod
    def from_dict(cls, data: object) -> MaintenanceDuty:
        """Inverse of :meth:`to_dict`; StateError on a wrong shape."""
        if not isinstance(data, dict):
            raise StateError(f"maintenance round: expected an object, got {type(data).__name__}")
        fire, held, raw = data.get("fire"), data.get("held_since"), data.get("round", {})
        for key, value in (("fire", fire), ("held_since", held)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise StateError(f"maintenance round: {key} must be a number or null, got {value!r}")
        if not isinstance(raw, dict):
            raise StateError(f"maintenance round: 'round' must be an object, got {type(raw).__name__}")
        kwargs: dict[str, Any] = {}
        for f in fields(MaintenanceRound):
            if f.name not in raw:
                continue
            value, default = raw[f.name], getattr(MaintenanceRound(), f.name)
            if isinstance(default, tuple):
                if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                    raise StateError(f"maintenance round: {f.name} must be a list of names, got {value!r}")
                value = tuple(value)
            elif isinstance(default, bool) and not isinstance(value, bool):
                raise StateError(f"maintenance round: {f.name} must be true or false, got {value!r}")
            elif f.name == "current" and value is not None and not isinstance(value, str):
                raise StateError(f"maintenance round: current must be a name or null, got {value!r}")
            kwargs[f.name] = value
        return cls(
            fire=float(fire) if fire is not None else None,
            held_since=float(held) if held is not None else None,
            round=MaintenanceRound(**kwargs),
        )


def _emit(name: str, fire: float, now: float, describe: Describe, **extra: object) -> Emit:
    """A daemon-level maintenance event about schedule fire `fire`."""
    return Emit(name, {"fire": fire, "fire_local": describe(fire), "late_s": round(now - fire), **extra})


def resume(
    duty: MaintenanceDuty, now: float, catch_up_s: float, describe: Describe
) -> tuple[MaintenanceDuty, MaintenanceOrders]:
    """A round persisted by an earlier daemon: go on with it if its fire is still within `catch_up_s`.

    The hold restarts at `now` (the profiles are being adopted). A stale round is dropped with a
    ``maintenance.abandoned`` event naming the profiles it did not reach.
    """
    if not duty.busy or duty.fire is None:
        return MaintenanceDuty(), MaintenanceOrders()
    if now - duty.fire > max(catch_up_s, ON_TIME_GRACE_S):
        left = (*((duty.round.current,) if duty.round.current else ()), *duty.round.queue)
        emit = _emit("maintenance.abandoned", duty.fire, now, describe, not_reached=left)
        return MaintenanceDuty(), MaintenanceOrders(((DAEMON, emit),))
    emit = _emit("maintenance.resumed", duty.fire, now, describe, done=duty.round.done)
    held = now if duty.held_since is not None else None
    return MaintenanceDuty(duty.fire, held, duty.round), MaintenanceOrders(((DAEMON, emit),))

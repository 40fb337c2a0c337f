"""The daemon's maintenance clock: when the schedule fires, and what fired while the daemon was down.

It owns the :class:`~supervisor.core.maintenance.schedule.CronSchedule` (standard crontab, read in
``maintenance.timezone``) and the state file ``maintenance.json``::

    {"last_evaluated": <epoch s>, "duty": <MaintenanceDuty.to_dict()>}

``last_evaluated`` means: every fire time up to here has been decided (run, coalesced or missed). The
loop calls :meth:`MaintenanceClock.keep` after each step; it writes the file (atomically) only after
daemon start, after a fire time was considered, and when the maintenance round changed (a turn began
or ended): a few writes a week, never one per tick. Nothing needs remembering between two fire
times: the fires in (last write, now] are exactly the ones not yet decided, so a daemon that was down
over a fire finds it at start and :func:`~supervisor.core.maintenance.plan.plan_catch_up` decides. The
decisions about profiles are in :mod:`supervisor.core.maintenance.duty`; see docs/maintenance.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import structlog

from supervisor.adapters.store.state import Store
from supervisor.config import MaintenanceConfig
from supervisor.core import actions as A
from supervisor.core.errors import StateError
from supervisor.core.events import MaintenanceRequested
from supervisor.core.fleet.actions import Dispatch, FleetAction, Raise, Record
from supervisor.core.maintenance.duty import MaintenanceDuty, MaintenanceOrders, resume
from supervisor.core.maintenance.plan import CatchUp, plan_catch_up
from supervisor.core.maintenance.schedule import CronSchedule
from supervisor.core.profile_state import ProfileState

log = structlog.get_logger("supervisor.maintenance")


class MaintenanceClock:
    """The maintenance schedule of the daemon config and its persisted evaluation (loop thread only)."""

    def __init__(self, config: MaintenanceConfig, store: Store) -> None:
        self.config = config
        self._store = store
        self.schedule = CronSchedule.parse(config.cron, config.timezone) if config.enabled else None
        self.next_fire: float | None = None
        self.last_evaluated: float | None = None
        self._kept = MaintenanceDuty()
        self._dirty = False  # evaluated since the last write
        self.duty = MaintenanceDuty()  # the round in progress (core/maintenance/duty.py decides)

    def start(self, now: float) -> tuple[CatchUp, MaintenanceDuty]:
        """At daemon start: the verdict on fires since the last evaluation, and the round to resume.

        A missing file is a first run (nothing caught up); a corrupt one is moved aside by the store,
        logged, and treated as a first run.
        """
        if self.schedule is None:
            return CatchUp(), MaintenanceDuty()
        duty = MaintenanceDuty()
        try:
            data = self._store.load_maintenance() or {}
            last = data.get("last_evaluated")
            if last is not None and (isinstance(last, bool) or not isinstance(last, int | float)):
                raise StateError(f"maintenance.json: last_evaluated must be a number, got {last!r}")
            self.last_evaluated = float(last) if last is not None else None
            if data.get("duty") is not None:
                duty = MaintenanceDuty.from_dict(data["duty"])
        except StateError as exc:
            log.error("maintenance.state_unreadable", error=str(exc))
        self._kept = duty
        return self._evaluate(now), duty

    def poll(self, now: float) -> CatchUp:
        """This tick's verdict: a run when a fire time has come, else nothing (no I/O then)."""
        if self.schedule is None or self.next_fire is None or now < self.next_fire:
            return CatchUp()
        return self._evaluate(now)

    def keep(self, duty: MaintenanceDuty) -> None:
        """After each step: persist the evaluation and the round when either changed (no write otherwise).

        Written together, after the loop acted on the verdict: a fire is never recorded as decided
        without the round it started.
        """
        if duty != self._kept or self._dirty:
            self._kept, self._dirty = duty, False
            self._save()

    def describe(self, ts: float) -> str:
        """A fire time as an absolute local time with weekday, e.g. ``Sun 2026-12-06 04:00 CET``."""
        if self.schedule is None:
            return datetime.fromtimestamp(ts).astimezone().strftime("%a %Y-%m-%d %H:%M %Z")
        return self.schedule.describe(ts)

    def status(self) -> dict[str, Any]:
        """The maintenance block of the status document."""
        sched, nxt = self.schedule, self.next_fire
        return {
            "enabled": sched is not None,
            "cron": self.config.cron,
            "timezone": sched.tz_name if sched is not None else self.config.timezone,
            "next": (
                datetime.fromtimestamp(nxt, sched.tz).isoformat(timespec="seconds")
                if sched is not None and nxt is not None
                else None
            ),
            "next_local": self.describe(nxt) if nxt is not None else None,
            "last_evaluated": self.last_evaluated,
        }

    def _evaluate(self, now: float) -> CatchUp:
        assert self.schedule is not None
        last = self.last_evaluated
        fires = self.schedule.fires_between(last, now) if last is not None else []
        plan = plan_catch_up(last, now, fires, self.config.catch_up_s)
        self.last_evaluated = now
        self.next_fire = self.schedule.next_fire(now)
        self._dirty = True
        return plan

    def _save(self) -> None:
        try:
            data = {"last_evaluated": self.last_evaluated, "duty": self._kept.to_dict()}
            self._store.save_maintenance(data)
        except StateError as exc:  # the next write may succeed; a daemon restart may then miss a fire
            log.error("maintenance.state_write_failed", error=str(exc))

    # ---- the loop's side: the decisions are core's (MaintenanceDuty.step), the orders fleet actions ----

    def begin(self, now: float, states: Mapping[str, ProfileState]) -> list[FleetAction]:
        """At daemon start: resume a round an earlier daemon left, then decide on the fires since the last
        evaluation."""
        plan, duty = self.start(now)
        self.duty, orders = resume(duty, now, self.config.catch_up_s, self.describe)
        return _actions(orders) + self._step(now, states, plan)

    def tick(self, now: float, states: Mapping[str, ProfileState]) -> list[FleetAction]:
        """Each tick: one maintenance step with this tick's verdict (no I/O unless a fire time has come)."""
        return self._step(now, states, self.poll(now))

    def _step(self, now: float, states: Mapping[str, ProfileState], plan: CatchUp) -> list[FleetAction]:
        self.duty, orders = self.duty.step(now, states, plan, self.describe)
        self.keep(self.duty)
        return _actions(orders)


def _actions(orders: MaintenanceOrders) -> list[FleetAction]:
    """The maintenance orders as fleet actions: its events and alerts, then its requests."""
    out: list[FleetAction] = []
    for profile, action in orders.records:
        if isinstance(action, A.Emit):
            out.append(Record(profile, action.name, dict(action.fields)))
        elif isinstance(action, A.Alert):
            out.append(Raise(profile, action))
    return out + [Dispatch(name, MaintenanceRequested()) for name in orders.requests]

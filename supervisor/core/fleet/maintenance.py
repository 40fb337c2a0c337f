"""Scheduled maintenance, the fleet step's side (pure; docs/maintenance.md): when the schedule fires, what
fired while the daemon was down, and the round in progress (decided by
:class:`~supervisor.core.maintenance.duty.MaintenanceDuty`).

``maint_evaluated`` means: every fire time up to here has been decided (run, coalesced or missed). It and
the round are written to ``maintenance.json`` (``SaveMaintenance``) after the daemon's first tick, after a
fire time was considered, and when the round changed: a few writes a week, never one per tick. The fires
in (last write, now] are exactly the ones not yet decided, so a daemon that was down over a fire finds it
at its first tick and :func:`~supervisor.core.maintenance.plan.plan_catch_up` decides.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from supervisor.core import actions as A
from supervisor.core.events import MaintenanceRequested
from supervisor.core.fleet.actions import Dispatch, FleetAction, Raise, Record, SaveMaintenance
from supervisor.core.fleet.policy import MaintenanceRule
from supervisor.core.fleet.state import FleetState
from supervisor.core.maintenance.duty import MaintenanceDuty, MaintenanceOrders, resume
from supervisor.core.maintenance.plan import CatchUp, plan_catch_up
from supervisor.core.profile_state import ProfileState


def describe(rule: MaintenanceRule, ts: float) -> str:
    """A fire time as an absolute local time with weekday, e.g. ``Sun 2026-12-06 04:00 CET``."""
    if rule.schedule is None:
        return datetime.fromtimestamp(ts).astimezone().strftime("%a %Y-%m-%d %H:%M %Z")
    return rule.schedule.describe(ts)


def tick(
    fleet: FleetState, now: float, profiles: dict[str, ProfileState], rule: MaintenanceRule
) -> tuple[FleetState, list[FleetAction]]:
    """One maintenance step: at the first tick resume a round an earlier daemon left and decide on the
    fires since the last evaluation; later, a run when a fire time has come."""
    out: list[FleetAction] = []
    duty, plan, evaluated = fleet.maintenance, CatchUp(), False
    if not fleet.maint_begun:
        duty = duty if rule.schedule is not None else MaintenanceDuty()
        duty, orders = resume(duty, now, rule.catch_up_s, lambda t: describe(rule, t))
        out += actions(orders)
        fleet = replace(fleet, maint_begun=True)
        evaluated = rule.schedule is not None
    elif rule.schedule is not None and fleet.maint_next is not None and now >= fleet.maint_next:
        evaluated = True
    if evaluated and rule.schedule is not None:
        last = fleet.maint_evaluated
        fires = rule.schedule.fires_between(last, now) if last is not None else []
        plan = plan_catch_up(last, now, fires, rule.catch_up_s)
        fleet = replace(fleet, maint_evaluated=now, maint_next=rule.schedule.next_fire(now))
    new, orders = duty.step(now, profiles, plan, lambda t: describe(rule, t))
    out += actions(orders)
    if evaluated or new != fleet.maintenance:
        out.append(SaveMaintenance(fleet.maint_evaluated, new.to_dict()))
    return replace(fleet, maintenance=new), out


def actions(orders: MaintenanceOrders) -> list[FleetAction]:
    """The duty's orders as fleet actions: its events and alerts, then its requests."""
    out: list[FleetAction] = []
    for profile, action in orders.records:
        if isinstance(action, A.Emit):
            out.append(Record(profile, action.name, dict(action.fields)))
        elif isinstance(action, A.Alert):
            out.append(Raise(profile, action))
    return out + [Dispatch(name, MaintenanceRequested()) for name in orders.requests]


def status(fleet: FleetState, rule: MaintenanceRule) -> dict[str, Any]:
    """The maintenance block of the status document."""
    sched, nxt = rule.schedule, fleet.maint_next
    return {
        "enabled": sched is not None,
        "cron": rule.cron,
        "timezone": sched.tz_name if sched is not None else rule.timezone,
        "next": (
            datetime.fromtimestamp(nxt, sched.tz).isoformat(timespec="seconds")
            if sched is not None and nxt is not None
            else None
        ),
        "next_local": describe(rule, nxt) if nxt is not None else None,
        "last_evaluated": fleet.maint_evaluated,
    }

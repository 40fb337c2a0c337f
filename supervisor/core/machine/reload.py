"""Configuration changes: a reloaded profile and the drift of its container (never a bounce).

A profile edited under a running container changes what the *next* start creates; the running
container is left alone and marked with the fields in which it differs (``drift``).
"""

from __future__ import annotations

from supervisor.core.actions import CheckDrift
from supervisor.core.events import DriftChecked
from supervisor.core.machine import last_good
from supervisor.core.machine.builder import Step
from supervisor.core.states import CONTAINER_STATES

#: A serving container is compared with its profile this often (and after a reload or an adoption): an
#: edited bind-mounted patch file is drift too (docs/operations.md "Patch custody").
DRIFT_RECHECK_S = 15.0


def on_config_reloaded(c: Step) -> None:
    """The profile changed: check the container we have against it (no container: nothing drifts).

    A rollback to the last known good ends: the next start tries the changed config.
    """
    last_good.forget_rollback(c, "config changed")
    if c.s.state in CONTAINER_STATES and c.s.container_id is not None:
        c.do(CheckDrift(c.s.container_id))
    elif c.s.drift:
        c.set(drift=())


def on_drift_checked(c: Step, ev: DriftChecked) -> None:
    """Mark (or clear) the drift of our current container; a report about an older one is late."""
    if ev.container_id != c.s.container_id or ev.error is not None:
        if ev.error is not None and ev.container_id == c.s.container_id:
            c.emit("drift.check_failed", container_id=ev.container_id, error=ev.error)
        return
    if ev.fields == c.s.drift:
        return
    had = bool(c.s.drift)
    if ev.fields:
        c.emit("container.drift", container_id=ev.container_id, fields=list(ev.fields), detail=ev.detail)
    else:
        c.emit("container.drift_cleared", container_id=ev.container_id)
    c.set(drift=ev.fields)
    st = c.s.state
    if ev.fields and not had:  # one warning per drift (condition "drift"), resolved when it clears
        what = ", ".join(ev.fields)
        c.alert_kind("warning", "drift.found", st, st, ev.detail or what, condition="drift", fields=what)
    elif had and not ev.fields:
        c.alert_kind(
            "info", "drift.cleared", st, st, "the container matches its profile again", resolves=True
        )


def tick_drift(c: Step) -> None:
    """Serving: the drift check is due again (the first tick only schedules it)."""
    due = c.s.next_drift_check_at
    if c.s.container_id is None or (due is not None and c.now < due):
        return
    c.set(next_drift_check_at=c.now + DRIFT_RECHECK_S)
    if due is not None:
        c.do(CheckDrift(c.s.container_id))

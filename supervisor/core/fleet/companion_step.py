"""The companions' side of the fleet step (pure): which checks are due, and what one answer means (a flip
becomes ``companion.failing`` / ``companion.recovered`` and a warning / info alert; never a restart). A
companion URL is shown with its userinfo and token parameters masked."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.actions import Alert
from supervisor.core.alerts.localize import title_en
from supervisor.core.fleet.actions import CheckCompanion, FleetAction, Raise, Record
from supervisor.core.fleet.companions import CompanionHealth
from supervisor.core.fleet.events import CompanionChecked
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.spec.secrets import mask_url


def due(fleet: FleetState, policy: FleetPolicy, now: float) -> tuple[FleetState, list[FleetAction]]:
    """Start the checks that are due (one GET each; the next is due an interval later even if it hangs)."""
    actions: list[FleetAction] = []
    configured = {c.key for c in policy.companions}
    if set(fleet.companions) - configured:  # a reload removed some (or an earlier config had them)
        fleet = replace(fleet, companions={k: h for k, h in fleet.companions.items() if k in configured})
    for c in policy.companions:
        h = fleet.companions.get(c.key) or CompanionHealth(c.name)
        if h.due(now):
            fleet = fleet.with_companion(c.key, h.scheduled(now, c.interval_s))
            actions.append(CheckCompanion(c))
    return fleet, actions


def checked(
    fleet: FleetState, ev: CompanionChecked, policy: FleetPolicy, now: float
) -> tuple[FleetState, list[FleetAction]]:
    """One answer: the new health; on a flip an event and an alert."""
    key = f"{ev.profile}/{ev.name}"
    c = next((c for c in policy.companions if c.key == key), None)
    if c is None:
        return fleet, []
    health, flip = (fleet.companions.get(key) or CompanionHealth(c.name)).observe(
        ev.ok, ev.status, ev.error, now
    )
    fleet = fleet.with_companion(key, health)
    if flip is None:
        return fleet, []
    what = f"HTTP {ev.status}" if ev.status is not None else (ev.error or "no answer")
    url = mask_url(c.url)
    fields: dict[str, object] = {"companion": ev.name, "url": url, "status": ev.status, "error": ev.error}
    params = (("name", ev.name),)
    if flip == "bad":
        record = Record(ev.profile, "companion.failing", fields)
        alert = Alert(
            "warning",
            title_en("companion.failing", params),
            "ok",
            "failing",
            f"{url}: {what}, expected HTTP {c.expect_status} (not restarted: not ours)",
            kind="companion.failing",
            params=params,
        )
    else:
        record = Record(ev.profile, "companion.recovered", fields)
        title = title_en("companion.back", params)
        alert = Alert("info", title, "failing", "ok", f"{url}: {what}", kind="companion.back", params=params)
    return fleet, [record, Raise(ev.profile, alert, c.container)]


def status(fleet: FleetState, policy: FleetPolicy) -> dict[str, list[dict[str, object]]]:
    """``{profile: [companion status, ...]}`` for the status document (configured companions only)."""
    out: dict[str, list[dict[str, object]]] = {}
    for c in policy.companions:
        h = fleet.companions.get(c.key) or CompanionHealth(c.name)
        out.setdefault(c.profile, []).append(h.to_dict())
    return out

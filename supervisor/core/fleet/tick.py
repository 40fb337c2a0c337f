"""The clock's side of the fleet step (pure): what one tick makes due. Companion checks, the heartbeat's
verdict, the daily digest, ``daemon.started`` once every profile was looked at, the flight recorder's
record of the profiles' states."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from supervisor.core.alerts.message import iso_local
from supervisor.core.fleet import companion_step, maintenance, seat_step, sentinel
from supervisor.core.fleet.actions import Announce, Beat, FleetAction, FlightSample, Log, SendDigest
from supervisor.core.fleet.digest import next_daily
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_UP_STATES

_FLIP = {True: "heartbeat.verdict_failing", False: "heartbeat.verdict_ok"}


def settled(s: ProfileState) -> bool:
    """The daemon has looked at the profile's container (and knows since when an adopted one runs)."""
    if s.booting:
        return False
    return not (s.adopted and s.state in CONTAINER_UP_STATES and s.container_started_at is None)


def tick(
    fleet: FleetState, now: float, profiles: Mapping[str, ProfileState], policy: FleetPolicy
) -> tuple[FleetState, list[FleetAction]]:
    fleet, actions = maintenance.tick(fleet, now, dict(profiles), policy.maintenance)
    fleet, checks = companion_step.due(fleet, policy, now)
    actions += checks
    fleet, released = seat_step.released(fleet, profiles, policy)  # held preflights whose seat is free now
    fleet, canaries = sentinel.due(fleet, now, profiles, policy)
    actions += released + canaries
    if fleet.started_at is None:
        fleet = replace(fleet, started_at=now)
    if not fleet.announced:
        waited = max(0.0, now - (fleet.started_at or now))
        if waited >= policy.settle_timeout_s or all(settled(s) for s in profiles.values()):
            fleet = replace(fleet, announced=True)
            actions.append(Announce(dict(profiles), waited))
    if policy.heartbeat:
        watch = replace(fleet.serving, fail_after_s=policy.fail_after_s).observe(profiles, now)
        verdict = watch.verdict(profiles, now)
        if verdict.failing != fleet.beat_failing:
            flip = {"reasons": list(verdict.reasons)} if verdict.failing else {}
            actions.append(Log("warning" if verdict.failing else "info", _FLIP[verdict.failing], flip))
        fleet = replace(fleet, serving=watch, beat_failing=verdict.failing)
        line = ", ".join(f"{n}: {s.state.value}" for n, s in profiles.items())
        actions.append(Beat(verdict.failing, verdict.reasons, line))
    if policy.digest_at is not None and policy.digest_tz is not None:
        if fleet.digest_next is None:
            first = next_daily(now, policy.digest_at, policy.digest_tz)
            fleet = replace(fleet, digest_next=first)
            actions.append(Log("info", "digest.scheduled", {"next": iso_local(first)}))
        elif now >= fleet.digest_next:
            fleet = replace(fleet, digest_next=next_daily(now, policy.digest_at, policy.digest_tz))
            nxt = maintenance.status(fleet, policy.maintenance)["next_local"]
            actions.append(SendDigest(dict(profiles), now, now - (fleet.started_at or now), nxt))
    actions.append(FlightSample({n: s.state.value for n, s in profiles.items()}))
    return fleet, actions

"""The memory guard's side of the fleet step (pure): a host memory sample, the hard floor (every container of
ours killed at once) and the debounced floors (whom :func:`memory_guard_targets` names is stopped with the
emergency grace). See docs/wedge.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from supervisor.core.events import MemoryPressure
from supervisor.core.fleet.actions import Dispatch, FleetAction, Log
from supervisor.core.fleet.events import MemorySampled
from supervisor.core.fleet.policy import MemoryRule
from supervisor.core.fleet.state import FleetState
from supervisor.core.host.memguard import hard_floor
from supervisor.core.host_events import HardFloor
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_STATES, DRAIN_STATES, SERVING_STATES, State


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


def host_status(ev: MemorySampled, rule: MemoryRule) -> dict[str, Any]:
    """The status document's ``daemon.host`` section of one sample."""
    psi = None
    if ev.psi_some_avg10 is not None:
        some, full, some60 = ev.psi_some_avg10, ev.psi_full_avg10, ev.psi_some_avg60
        psi = {"some_avg10": some, "full_avg10": full, "some_avg60": some60}
    return {
        "mem_available_gib": round(ev.mem_available_gib, 2),
        "mem_free_gib": round(ev.mem_free_gib, 2),
        "swap_used_gib": round(ev.swap_used_gib, 3),
        "swap_total_gib": round(ev.swap_total_gib, 3),
        "psi": psi,
        "memory_guard": "on" if rule.enabled else "off",
    }


def on_sample(
    fleet: FleetState, ev: MemorySampled, profiles: Mapping[str, ProfileState], rule: MemoryRule
) -> tuple[FleetState, list[FleetAction]]:
    """One sample: shown in status; below the hard floor every container of ours is killed; when the
    debounced guard trips, the loading profiles (else the serving ones) are stopped."""
    fleet = replace(fleet, host={**fleet.host, **host_status(ev, rule)})
    if not rule.enabled:
        return fleet, []
    avail, free = ev.mem_available_gib, ev.mem_free_gib
    g = rule.guard
    hard = hard_floor(
        avail,
        free,
        mem_available_min_gib=rule.hard_mem_available_min_gib,
        memfree_min_gib=rule.hard_memfree_min_gib,
        memavailable_below_gib=g.memavailable_below_gib,
    )
    guard, why = replace(g, low_streak=fleet.mem_low_streak).observe(avail, free, ev.psi_full_avg10)
    fleet = replace(fleet, mem_low_streak=guard.low_streak)
    actions: list[FleetAction] = []
    if hard is not None:
        targets = [n for n, s in profiles.items() if s.state in CONTAINER_STATES]
        if targets:
            actions.append(Log("error", "memory.hard_floor", {"detail": hard, "targets": targets}))
        return fleet, [*actions, *(Dispatch(n, HardFloor(hard)) for n in targets)]
    if why is None:
        return fleet, []
    targets = memory_guard_targets({n: s.state for n, s in profiles.items()})
    actions.append(Log("error", "memory.guard_tripped", {"detail": why, "targets": targets}))
    return fleet, [*actions, *(Dispatch(n, MemoryPressure(why)) for n in targets)]

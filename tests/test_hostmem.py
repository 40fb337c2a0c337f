"""The host sampler on the real /proc, and the memory guard's side of the fleet step: the debounce counts
samples, the hard floor kills at once, a disabled guard still shows the sample."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.fleet.actions import Dispatch, Log
from supervisor.core.fleet.events import MemorySampled
from supervisor.core.fleet.policy import FleetPolicy, MemoryRule
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step
from supervisor.core.host.memguard import MemoryGuard
from supervisor.core.host_events import HardFloor
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.daemon.sources.host_memory import read_sample


def _profiles(**states: State) -> dict[str, ProfileState]:
    return {n: replace(ProfileState.initial(n, 0.0, 3, 600.0), state=st) for n, st in states.items()}


def _policy(**rule: object) -> FleetPolicy:
    return FleetPolicy(memory=MemoryRule(**rule))  # type: ignore[arg-type]


def test_the_debounce_counts_samples_and_then_stops_the_load() -> None:
    """samples 2: one low sample does nothing, the second stops what loads (not what serves)."""
    policy = _policy(guard=MemoryGuard(mem_available_min_gib=8.0, samples=2), hard_mem_available_min_gib=0.0)
    profiles = _profiles(a=State.RUNNING, b=State.STARTING)
    low = MemorySampled(5.0, 4.0)
    fleet, actions = step(FleetState(), low, 1.0, profiles, policy)
    assert (fleet.mem_low_streak, actions) == (1, [])
    fleet, actions = step(fleet, low, 2.0, profiles, policy)
    assert fleet.mem_low_streak == 0
    assert [a.profile for a in actions if isinstance(a, Dispatch)] == ["b"]
    assert any(isinstance(a, Log) and a.name == "memory.guard_tripped" for a in actions)
    fleet, actions = step(fleet, MemorySampled(50.0, 40.0), 3.0, profiles, policy)  # good: nothing
    assert (fleet.mem_low_streak, actions) == (0, [])


def test_the_hard_floor_kills_every_container_at_once() -> None:
    """One sample below the hard floor: HardFloor to every profile with a container, no debounce."""
    policy = _policy(guard=MemoryGuard(samples=5), hard_mem_available_min_gib=3.0)
    profiles = _profiles(a=State.RUNNING, b=State.STARTING, c=State.STOPPED)
    _, actions = step(FleetState(), MemorySampled(2.0, 1.5), 1.0, profiles, policy)
    hard = [a for a in actions if isinstance(a, Dispatch)]
    assert [a.profile for a in hard] == ["a", "b"]
    assert all(isinstance(a.event, HardFloor) for a in hard)


def test_a_real_sample_is_shown_and_a_disabled_guard_never_trips() -> None:
    """The status section is filled from the real /proc even with the guard off."""
    sample = read_sample()
    policy = _policy(enabled=False, guard=MemoryGuard(mem_available_min_gib=1e9, samples=1))
    fleet, actions = step(FleetState(), sample, 1.0, _profiles(a=State.RUNNING), policy)
    assert actions == []
    st = fleet.host
    assert st["mem_available_gib"] > 0
    assert st["swap_total_gib"] >= st["swap_used_gib"] >= 0
    assert st["memory_guard"] == "off"
    assert st["psi"] is None or st["psi"]["some_avg10"] >= 0

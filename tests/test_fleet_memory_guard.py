"""Which containers the memory guard stops (core/fleet/memory.py ``memory_guard_targets``), pure."""

from __future__ import annotations

from supervisor.core.fleet.memory import memory_guard_targets
from supervisor.core.states import State


def test_the_loading_profile_is_stopped_and_the_serving_ones_are_spared() -> None:
    """A load is the likely cause of a sudden drop: only what is STARTING is stopped."""
    states = {"a": State.RUNNING, "b": State.STARTING, "c": State.DEGRADED, "d": State.STOPPED}
    assert memory_guard_targets(states) == ["b"]


def test_every_loading_profile_is_stopped() -> None:
    """Two loads at once (two hosts' lock files, an operator restore): both are stopped."""
    states = {"a": State.STARTING, "b": State.RUNNING, "c": State.STARTING}
    assert memory_guard_targets(states) == ["a", "c"]


def test_without_a_load_every_container_that_holds_memory_is_stopped() -> None:
    """Nothing loads: every serving or draining container goes; stopped, failed, waiting ones are spared."""
    states = {
        "run": State.RUNNING,
        "deg": State.DEGRADED,
        "drain": State.DRAINING,
        "maint": State.MAINTENANCE,
        "off": State.STOPPED,
        "fatal": State.FATAL,
        "wait": State.WAITING,
        "pre": State.PREFLIGHT,
        "back": State.BACKOFF,
    }
    assert sorted(memory_guard_targets(states)) == ["deg", "drain", "maint", "run"]


def test_nothing_to_stop_when_no_container_is_up() -> None:
    """A guard trip on a box whose profiles are all down stops nothing."""
    assert memory_guard_targets({"a": State.STOPPED, "b": State.FATAL}) == []

"""The debounced memory guard (pure) and its edges in the state machine."""

from __future__ import annotations

from supervisor.core.actions import StopContainer
from supervisor.core.events import ContainerStopped, LogReady, MemoryPressure
from supervisor.core.host.memguard import MemoryGuard
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

GUARD = MemoryGuard(mem_available_min_gib=6.0, samples=5, memfree_min_gib=2.0, memavailable_below_gib=10.0)


def _feed(g: MemoryGuard, samples: list[tuple[float, float]]) -> tuple[MemoryGuard, list[str | None]]:
    out: list[str | None] = []
    for avail, free in samples:
        g, why = g.observe(avail, free)
        out.append(why)
    return g, out


def test_trips_only_after_consecutive_low_samples() -> None:
    """Five MemAvailable samples under 6 GiB in a row trip it, on the fifth; four do not."""
    _, out = _feed(GUARD, [(5.0, 1.0)] * 4)
    assert out == [None] * 4
    _, out = _feed(GUARD, [(5.0, 1.0)] * 5)
    assert out[:4] == [None] * 4
    assert out[4] is not None
    assert "MemAvailable 5.0 GiB < 6 GiB for 5 consecutive samples" in out[4]


def test_a_single_good_sample_resets_the_streak() -> None:
    """Noise never trips it: one sample back above the limit starts the count again."""
    _, out = _feed(GUARD, [(5.0, 1.0)] * 4 + [(20.0, 1.0)] + [(5.0, 1.0)] * 4)
    assert out == [None] * 9


def test_page_cache_streaming_is_not_pressure() -> None:
    """Weight loading: MemFree tiny but MemAvailable high (page cache) never trips it."""
    _, out = _feed(GUARD, [(40.0, 0.3)] * 50)
    assert out == [None] * 50


def test_memfree_rule_applies_only_when_available_is_also_low() -> None:
    """MemFree < 2 GiB while MemAvailable < 10 GiB (but above 6) trips after five samples."""
    _, out = _feed(GUARD, [(8.0, 1.5)] * 5)
    assert out[4] is not None
    assert "MemFree 1.5 GiB < 2 GiB" in out[4]


def test_streak_restarts_after_a_trip() -> None:
    """After tripping, the next trip needs another full streak."""
    g, out = _feed(GUARD, [(5.0, 1.0)] * 5)
    assert out[4] is not None
    _, out = _feed(g, [(5.0, 1.0)] * 4)
    assert out == [None] * 4


def test_pressure_while_running_is_an_emergency() -> None:
    """RUNNING + MemoryPressure -> emergency stop, counted by the breaker once the container is gone."""
    d = Driver(policy=policy())
    fresh_boot(d)
    d.to_running()
    acts = d.send(MemoryPressure(detail="MemAvailable 4.0 GiB < 6 GiB"))
    assert d.st() == State.STOPPING
    assert [a.reason for a in acts if isinstance(a, StopContainer)] == ["emergency"]
    assert "memory.pressure" in d.emits()
    d.send(ContainerStopped())
    assert len(d.s.breaker.failures) == 1


def test_pressure_while_loading_fails_the_start() -> None:
    """STARTING + MemoryPressure -> the start fails (failed_memory_guard) before the host freezes."""
    d = Driver(policy=policy())
    fresh_boot(d)
    d.to_starting()
    d.send(LogReady())
    d.send(MemoryPressure(detail="MemAvailable 4.0 GiB < 6 GiB"))
    assert d.st() == State.STOPPING
    d.send(ContainerStopped())
    assert d.records()[-1].outcome == "failed_memory_guard"

"""The loop's host-memory sampler on the real /proc: the sample interval, the debounce in samples, status."""

from __future__ import annotations

from supervisor.config import MemoryGuardConfig
from supervisor.daemon.sources.host_memory import HostMemory


def test_samples_follow_the_interval_and_the_debounce_counts_samples() -> None:
    """sample_interval_s 5: no sample between due times, so 2 bad samples take 5 s, not 2 ticks."""
    always_low = MemoryGuardConfig(mem_available_min_gib=1e9, samples=2, sample_interval_s=5.0)
    hm = HostMemory(always_low)
    assert hm.maybe_sample(100.0) is None  # sample 1 (bad)
    for mono in (101.0, 102.0, 103.0, 104.0):
        assert hm.maybe_sample(mono) is None  # not due: no sample taken
    why = hm.maybe_sample(105.0)  # sample 2 (bad): trips
    assert why is not None
    assert "for 2 consecutive samples" in why
    fast = HostMemory(MemoryGuardConfig(mem_available_min_gib=1e9, samples=2, sample_interval_s=1.0))
    assert fast.maybe_sample(100.0) is None
    assert fast.maybe_sample(101.0) is not None


def test_status_has_memory_swap_and_psi_and_a_disabled_guard_still_samples() -> None:
    """The status section is filled from the real /proc even with the guard off (which never trips)."""
    hm = HostMemory(MemoryGuardConfig(enabled=False, mem_available_min_gib=1e9, samples=1))
    assert hm.status() == {}
    assert hm.maybe_sample(0.0) is None
    st = hm.status()
    assert st["mem_available_gib"] > 0
    assert st["swap_total_gib"] >= st["swap_used_gib"] >= 0
    assert st["memory_guard"] == "off"
    assert st["psi"] is None or st["psi"]["some_avg10"] >= 0

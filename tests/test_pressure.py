"""Memory pressure (PSI, swap) on the real /proc files, and the pure host-reserve verdict."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from supervisor.adapters.host import pressure, system as host
from supervisor.core.host.reserve import GIB, reserve_verdict


def test_real_psi_file_parses_when_present() -> None:
    """The real /proc/pressure/memory parses into percentages in [0, 100] and a total that never goes back."""
    if not pressure.PSI_MEMORY.exists():
        assert pressure.read_psi() is None
        pytest.skip("this kernel has no PSI (/proc/pressure/memory absent)")
    first = pressure.read_psi()
    assert first is not None
    assert first.full is not None
    for line in (first.some, first.full):
        assert 0.0 <= line.avg10 <= 100.0
        assert 0.0 <= line.avg60 <= 100.0
        assert 0.0 <= line.avg300 <= 100.0
        assert line.total_us >= 0
    second = pressure.read_psi()
    assert second is not None
    assert second.some.total_us >= first.some.total_us


def test_psi_absent_or_garbage_is_none(tmp_path: Path) -> None:
    """A missing file, a directory and a file without a ``some`` line all give None, never an exception."""
    assert pressure.read_psi(tmp_path / "absent") is None
    assert pressure.read_psi(tmp_path) is None
    junk = tmp_path / "memory"
    junk.write_text("some avg10=x avg60=0.00 avg300=0.00 total=0\n")
    assert pressure.read_psi(junk) is None
    old = tmp_path / "old"
    old.write_text("some avg10=1.50 avg60=0.25 avg300=0.05 total=123456\n")
    assert pressure.read_psi(old) == pressure.MemoryPressure(
        some=pressure.PsiLine(1.5, 0.25, 0.05, 123456), full=None
    )


def test_swap_in_use_matches_psutil() -> None:
    """Swap used/total from the real /proc/meminfo agree with psutil (same source, bytes)."""
    used, total = pressure.swap_in_use(host.read_meminfo())
    swap = psutil.swap_memory()
    assert total == swap.total
    assert 0 <= used <= total
    assert abs(used - swap.used) <= 64 * 1024 * 1024  # swap can move between the two reads


def test_sample_combines_psi_and_swap(tmp_path: Path) -> None:
    """sample() reads both files; without PSI it still reports swap."""
    s = pressure.sample(psi_path=tmp_path / "absent")
    assert s.psi is None
    assert s.swap_total_bytes == psutil.swap_memory().total
    real = pressure.sample()
    assert (real.psi is not None) == pressure.PSI_MEMORY.exists()


def test_reserve_verdict_names_the_numbers() -> None:
    """Below the reserve: a sentence with both numbers and the fix; at or above it (or reserve 0): None."""
    msg = reserve_verdict(int(9.8 * GIB), 15)
    assert msg == (
        "MemAvailable 9.8 GiB after load < reserve 15 GiB: the host may freeze under load; "
        "lower --gpu-memory-utilization"
    )
    assert reserve_verdict(15 * GIB, 15) is None
    assert reserve_verdict(40 * GIB, 15) is None
    assert reserve_verdict(0, 0) is None
    assert "reserve 7.5 GiB" in (reserve_verdict(GIB, 7.5) or "")


def test_reserve_verdict_on_this_host() -> None:
    """With this host's real MemAvailable, a reserve above it gives a verdict and one below it none."""
    avail = host.read_meminfo()["MemAvailable"]
    assert reserve_verdict(avail, avail / GIB + 1) is not None
    assert reserve_verdict(avail, avail / GIB / 2) is None

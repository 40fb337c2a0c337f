"""The memory floor before a start follows the config (gmu x MemTotal + the host reserve), on every box.

Pure arithmetic, the real config parser, a real meminfo file read the way /proc/meminfo is, and the machine
with a plain ``now``: the floor derived for a Spark and a Thor config, a start that waits for memory to come
back after a stop (and shows the wait in ``status``), and vLLM's own refusal diagnosed when it comes anyway.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.adapters.host import system as host
from supervisor.config import load_config
from supervisor.core.clock import FakeClock
from supervisor.core.events import PreflightDone, Settled, SlotAcquired, StartRequested
from supervisor.core.host.reserve import memory_floor_gib
from supervisor.core.settings.daemon import HostConfig
from supervisor.core.states import State
from supervisor.core.vllm import cmdline
from supervisor.core.vllm.diagnosis import diagnose
from tests.test_machine_driver import Driver, fresh_boot
from tests.test_production_configs import _install

EXAMPLES = Path(__file__).resolve().parent.parent / "supervisor" / "data" / "examples"
FIXTURES = Path(__file__).parent / "fixtures" / "vllm-logs"


def _meminfo(path: Path, total_gib: float, available_gib: float) -> Path:
    kib = 1024 * 1024
    path.write_text(
        f"MemTotal:       {int(total_gib * kib)} kB\nMemFree:        1000 kB\n"
        f"MemAvailable:   {int(available_gib * kib)} kB\n",
        encoding="ascii",
    )
    return path


@pytest.mark.parametrize(
    ("box", "total_gib", "want"),
    [
        ("spark", 121.6, 0.80 * 121.6 + 15),  # 112.3 GiB: vLLM's check at gmu 0.80 wants 97.3 free
        ("thor", 122.86, 0.73 * 122.86 + 15),  # 104.7 GiB
    ],
)
def test_the_shipped_examples_derive_the_floor_from_the_profiles_gmu(
    tmp_path: Path, box: str, total_gib: float, want: float
) -> None:
    cfg = load_config(_install(tmp_path, f"daemon.{box}.yaml"))
    assert cfg.host.min_mem_available_auto
    (profile,) = cfg.profiles
    gmu = cmdline.gpu_memory_utilization(cmdline.argv_of(profile.container))
    meminfo = _meminfo(tmp_path / "meminfo.txt", total_gib, 100.0)
    assert host.start_floor_gib(cfg.host, gmu, meminfo) == pytest.approx(want, abs=0.05)
    text = (EXAMPLES / box / "daemon.yaml").read_text(encoding="utf-8")
    assert "min_mem_available_gib: auto" in text  # no literal on either path


def test_the_floor_without_a_gmu_is_vllms_default() -> None:
    assert memory_floor_gib(None, 100.0, 10.0) == pytest.approx(100.0)
    assert (
        host.start_floor_gib(HostConfig(min_mem_available_gib=7.0), 0.5) == 7.0
    )  # a literal stays a literal


def test_a_start_after_a_stop_waits_for_memory_to_come_back(tmp_path: Path) -> None:
    """MemAvailable comes back slowly after a stop (GB10): the wait ends when it covers the floor."""
    meminfo = _meminfo(tmp_path / "meminfo", 121.6, 60.0)
    hcfg = HostConfig(min_mem_available_auto=True, reserve_gib=15.0, settle_timeout_s=300.0)
    floor = host.start_floor_gib(hcfg, 0.8, meminfo)
    clock = FakeClock()
    seen: list[float] = []

    def memory_comes_back(seconds: float) -> None:  # the host gives 2 GiB back per second
        clock.advance(seconds)
        seen.append(clock.monotonic())
        _meminfo(meminfo, 121.6, min(118.0, 60.0 + 2.0 * (clock.monotonic() - 1000.0)))

    ok, mem = host.wait_for_memory(
        floor,
        hcfg.settle_timeout_s,
        clock,
        1.0,
        read=lambda: host.mem_available_gib(meminfo),
        sleep=memory_comes_back,
    )
    assert ok
    assert mem >= floor
    assert 25 <= len(seen) <= 27  # (112.3 - 60) / 2 GiB/s: about 26 s of waiting, not a fixed 10 s


def test_the_wait_shows_in_status() -> None:
    d = Driver()
    fresh_boot(d)
    d.send(StartRequested())
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=60.0))
    d.send(SlotAcquired())
    d.advance(40.0)
    wait = d.s.status_dict(d.now)["memory_wait"]
    assert wait is not None
    assert wait["waited_s"] == 40.0
    d.send(
        Settled(
            ok=True,
            detail="MemAvailable 112.4 GiB >= floor 112.3 GiB after waiting 40 s",
            mem_available_gib=112.4,
        )
    )
    assert d.st() == State.STARTING
    assert d.s.status_dict(d.now)["memory_wait"] is None


def test_vllms_free_memory_refusal_is_diagnosed_as_such() -> None:
    """vLLM refused anyway (fixture 040): its own free-memory check, never a generic engine failure."""
    lines = (
        (FIXTURES / "040-v0.9.1-free-memory-less-than-desired-then-failed-to-start.log")
        .read_text(encoding="utf-8")
        .splitlines()[2:]
    )
    report = diagnose(lines, [])
    assert report["vllm"]["outcome"] == "failed_gpu_mem_util"
    assert "vLLM refused to start: only 31.44/47.38 GiB were free" in report["diagnosis"]

"""Daemon RSS and CPU while it supervises two simulator profiles at the shipped probe cadence."""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import psutil

from bench.daemon_world import BenchWorld
from bench.stats import Summary, summarize

#: The shipped probe defaults (supervisor/config/model.py ProbeConfig), not the test harness' fast ones.
SHIPPED_PROBES: dict[str, Any] = {
    "interval_s": 15.0,
    "probe_timeout_s": 30.0,
    "failure_threshold": 4,
    "stall_after_s": 120.0,
}
SAMPLE_EVERY_S = 5.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """One look at the daemon process."""

    t: float  # seconds since the soak began
    rss: int  # bytes
    cpu: float  # user + system CPU seconds since process start
    threads: int


@dataclass(frozen=True)
class SoakResult:
    """What the soak saw."""

    seconds: float
    rss_mib: Summary
    cpu_pct: float  # average % of one core over the whole soak
    rss_first_min_mib: float
    rss_last_min_mib: float
    threads_max: int
    end_states: dict[str, str]
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]

    @property
    def rss_growth_mib(self) -> float:
        return round(self.rss_last_min_mib - self.rss_first_min_mib, 2)


def sample(proc: psutil.Process, t0: float) -> Sample:
    cpu = proc.cpu_times()
    return Sample(time.monotonic() - t0, proc.memory_info().rss, cpu.user + cpu.system, proc.num_threads())


def analyse(samples: list[Sample], end_states: dict[str, str], loads: tuple[Any, Any]) -> SoakResult:
    """Reduce the samples to medians, the CPU average and the first-vs-last-minute RSS."""
    first, last = samples[0], samples[-1]
    wall = max(last.t - first.t, 1e-9)
    first_min = [s.rss for s in samples if s.t - first.t <= 60.0]
    last_min = [s.rss for s in samples if last.t - s.t <= 60.0]
    return SoakResult(
        seconds=round(wall, 1),
        rss_mib=summarize([s.rss / MIB for s in samples], "MiB", 2),
        cpu_pct=round(100.0 * (last.cpu - first.cpu) / wall, 3),
        rss_first_min_mib=round(statistics.median(first_min) / MIB, 2),
        rss_last_min_mib=round(statistics.median(last_min) / MIB, 2),
        threads_max=max(s.threads for s in samples),
        end_states=end_states,
        load_before=loads[0],
        load_after=loads[1],
    )


def run_soak(world: BenchWorld, seconds: float, progress: bool = True) -> SoakResult:
    """Start a daemon on two simulator profiles, wait for RUNNING, then sample it every 5 s."""
    specs = [world.profile(n, **SHIPPED_PROBES) for n in ("soak-a", "soak-b")]
    d = world.daemon("soak", specs, extra={"log_level": "info"})
    for s in specs:
        d.wait_state(s.name, "RUNNING", 120)
    assert d.proc is not None
    proc = psutil.Process(d.proc.pid)
    load_before = os.getloadavg()
    t0 = time.monotonic()
    samples = [sample(proc, t0)]
    for _ in range(math.ceil(seconds / SAMPLE_EVERY_S)):
        time.sleep(max(0.0, t0 + (len(samples)) * SAMPLE_EVERY_S - time.monotonic()))
        samples.append(sample(proc, t0))
        if progress and len(samples) % 12 == 1:
            last = samples[-1]
            print(f"  soak {last.t:5.0f}s rss={last.rss / MIB:.1f}MiB cpu={last.cpu:.2f}s", flush=True)
    states = {s.name: str(d.status(s.name)["state"]) for s in specs}
    return analyse(samples, states, (load_before, os.getloadavg()))

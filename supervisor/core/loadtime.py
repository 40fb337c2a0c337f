"""How long a load takes, pure: the ledger's load times, the ETA, the slow-load rule; and the two machine
inputs about a load (members of :mod:`supervisor.core.events`' ``Event`` union).

Each fingerprint's earlier ready starts give the median load time: the ``status`` ETA and the slow-load
warning (elapsed > :data:`SLOW_FACTOR` x median) come from it. Whether a silent load still works (its CPU
time and block IO) is the container-activity rule of :mod:`supervisor.core.vllm.activity`.

The ledger's rows are read in ``perf.ledger.load_times``; ``load_s`` there is the seconds from the
start attempt (host settled, container created) to ready (``Step.load_s``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from supervisor.core.clock import format_duration

#: A load slower than this many times its fingerprint's median load time is a warning (once per start).
SLOW_FACTOR = 1.5


@dataclass(frozen=True)
class LoadActivity:
    """The loading container's CPU seconds and block-IO bytes so far (None: unreadable), read from its
    cgroup. Answers SampleLoad."""

    container_id: str
    cpu_s: float | None
    io_bytes: int | None
    thread_demand: float | None = None  # the busiest thread's runnable share since the last sample


@dataclass(frozen=True)
class LoadHistory:
    """The load times (s, newest first) of the earlier ready starts of config ``fingerprint`` in the
    ledger. Read with the KV baseline (answers ReadKvBaseline too)."""

    fingerprint: str | None
    times: tuple[float, ...] = ()


def median_load_s(times: Sequence[float]) -> float | None:
    """The median load time, or None without history."""
    return statistics.median(times) if times else None


def eta_s(median_s: float | None, elapsed_s: float | None) -> float | None:
    """Seconds until the load should end (0 once overdue), or None without history."""
    if median_s is None or elapsed_s is None:
        return None
    return max(0.0, median_s - elapsed_s)


def is_slow(median_s: float | None, elapsed_s: float | None) -> bool:
    """The load runs longer than SLOW_FACTOR x its median."""
    return median_s is not None and elapsed_s is not None and elapsed_s > SLOW_FACTOR * median_s


def eta_text(eta: float | None, median_s: float | None, starts: int) -> str:
    """``"ETA ~4 min (median load 12 min over 5 starts)"``; ``""`` without history."""
    if eta is None or median_s is None or starts <= 0:
        return ""
    plural = "start" if starts == 1 else "starts"
    head = f"ETA ~{format_duration(eta)}" if eta > 0 else "overdue"
    return f"{head} (median load {format_duration(median_s)} over {starts} {plural})"

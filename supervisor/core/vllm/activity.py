"""Whether a vLLM container works, pure: its CPU time and block IO between two samples of its cgroup. One rule
for a load that logs nothing (machine/loads) and for the serving engine's forward progress (vllm/progress,
machine/liveness).

A load is judged by three signals (docs/state-machine.md "Load activity"): its log lines, its CPU time
(a silent vision warm-up keeps 1-2 cores at 100 % for ~15 min, docs/field-notes.md "The box") and its
block IO (reading weights); the last two are this module's.
"""

from __future__ import annotations

#: Block IO below this many bytes between two samples is not progress (a stray log or cache write).
IO_MIN_BYTES = 1 << 20
#: CPU time and block IO are sampled this often while loading at most, and at least 4 times per
#: silence window (so a short test window is judged as a long field one).
SAMPLE_MAX_S = 15.0
SAMPLE_MIN_S = 1.0

# Whether a container's CPU use between two samples shows it working: one rule for the load
# and for the serving engine's forward progress (vllm/progress).
#
# ``cpu``: it used at least ``busy_cores`` cores on average (a stopped or idle real vLLM uses 0.02-0.03).
# ``cpu_starved``: it used less, but one of its threads was runnable (on a CPU or waiting on a run queue for
# one) at least :data:`RUNNABLE_SHARE` of the time: an engine stepping on a box whose CPUs others took. On
# real vLLM 0.32 with 12 busy containers beside it, a prefill got 0.1-0.4 cores while its compute thread was
# runnable 0.95-1.05 of every half second; SIGSTOPped under the same load, its busiest thread (a polling one)
# was runnable 0.09-0.31 (docs/vllm-facts.md "Forward progress under CPU starvation").

#: The share of a span one thread must have been runnable for to count as working (0.09-0.31 stopped,
#: ~1.0 working, measured).
RUNNABLE_SHARE = 0.5
#: The signal names this rule gives (not engine counters).
CPU_SIGNALS = ("cpu", "cpu_starved")


def cpu_signal(
    prev_cpu_s: float | None,
    cpu_s: float | None,
    dt_s: float,
    busy_cores: float,
    thread_demand: float | None,
) -> str | None:
    """``cpu``, ``cpu_starved`` or None (the comment above); ``thread_demand`` is the largest runnable share
    of one of the container's threads over the same span (adapters/cputime.ThreadDemand)."""
    if prev_cpu_s is not None and cpu_s is not None and dt_s > 0 and cpu_s - prev_cpu_s >= busy_cores * dt_s:
        return "cpu"
    if thread_demand is not None and thread_demand >= RUNNABLE_SHARE:
        return "cpu_starved"
    return None


def sample_every_s(silence_s: float) -> float:
    """Seconds between two CPU/IO samples of a load whose silence window is ``silence_s``."""
    return max(SAMPLE_MIN_S, min(SAMPLE_MAX_S, silence_s / 4))


def active(
    prev_cpu_s: float | None,
    cpu_s: float | None,
    prev_io: int | None,
    io: int | None,
    dt_s: float,
    busy_cores: float,
    thread_demand: float | None = None,
) -> tuple[str, ...]:
    """What moved between two samples ``dt_s`` apart: ``cpu`` or ``cpu_starved`` (:func:`cpu_signal`),
    ``io`` when it read or wrote at least :data:`IO_MIN_BYTES`."""
    out = []
    cpu = cpu_signal(prev_cpu_s, cpu_s, dt_s, busy_cores, thread_demand)
    if cpu is not None:
        out.append(cpu)
    if prev_io is not None and io is not None and io - prev_io >= IO_MIN_BYTES:
        out.append("io")
    return tuple(out)

"""Whether a container's CPU use between two samples shows it working: one rule for the load (loadtime)
and for the serving engine's forward progress (vllm/progress).

``cpu``: it used at least ``busy_cores`` cores on average (a stopped or idle real vLLM uses 0.02-0.03).
``cpu_starved``: it used less, but one of its threads was runnable (on a CPU or waiting on a run queue for
one) at least :data:`RUNNABLE_SHARE` of the time: an engine stepping on a box whose CPUs others took. On
real vLLM 0.32 with 12 busy containers beside it, a prefill got 0.1-0.4 cores while its compute thread was
runnable 0.95-1.05 of every half second; SIGSTOPped under the same load, its busiest thread (a polling one)
was runnable 0.09-0.31 (docs/vllm-facts.md "Forward progress under CPU starvation")."""

from __future__ import annotations

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
    """``cpu``, ``cpu_starved`` or None (see the module); ``thread_demand`` is the largest runnable share
    of one of the container's threads over the same span (adapters/cputime.ThreadDemand)."""
    if prev_cpu_s is not None and cpu_s is not None and dt_s > 0 and cpu_s - prev_cpu_s >= busy_cores * dt_s:
        return "cpu"
    if thread_demand is not None and thread_demand >= RUNNABLE_SHARE:
        return "cpu_starved"
    return None

"""The kill rule for kernel memory lines (docs/wedge.md "Which kernel lines kill"). Pure, plain values.

A memory line (NV_ERR_NO_MEMORY, nvmap / CMA ENOMEM, an OOM kill) is judged against one profile's
container from what is known the moment it is read:

* whose it is (``ours`` / ``other`` / ``nobody``: core/host/attribution.py);
* when the kernel printed it, against when the container started (a line printed before is never that
  container's) and whether it was read from the backlog (printed before this daemon's follower opened the
  log: a daemon restarted, or started with a position from another boot, records it and never judges it);
* the phase: loading before the KV pool is sized (vLLM's memory profiler probes for the ceiling: a
  healthy GB10 boot prints ~60 NV_ERR_NO_MEMORY lines here), loading after it, serving;
* the rate: this container's lines naming nobody in the last ``storm_window_s``;
* the headroom: MemAvailable of the host's latest memory sample.

Verdicts: ``kill`` (SIGKILL now), ``tolerate`` (a line naming nobody while the profiler probes with the
host's memory fine: remembered, so a load that then dies is diagnosed from it, and recorded once per
load), ``remember`` (kept for a failure that follows, nothing stopped), ``ignore`` (not this container's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from supervisor.core.host.attribution import NOBODY, OTHER, OURS
from supervisor.core.host.kernel_log import KILL_KINDS

LOADING_PROFILE: Final = "loading_profile"  # STARTING, the KV pool not printed yet
LOADING_SIZED: Final = "loading_sized"  # STARTING, the KV pool printed (the profiler is done)
SERVING: Final = "serving"  # RUNNING, DEGRADED, DRAINING, MAINTENANCE
OTHER_PHASE: Final = "other"  # a container, stopping or checked (a line naming nobody is not its own)

KILL: Final = "kill"
TOLERATE: Final = "tolerate"
REMEMBER: Final = "remember"
IGNORE: Final = "ignore"

#: A storm: more than this many lines naming nobody within ``STORM_WINDOW_S`` while the profiler probes.
#: The field's healthy GB10 boot printed ~60 over the first ~10 s of a load: twice that is a storm.
STORM_LINES: Final = 120
STORM_WINDOW_S: Final = 10.0
#: A line stamped up to this long before the container started is still taken for its own (printk's
#: clock and the wall clock are converted through CLOCK_MONOTONIC; docs/wedge.md says why 1 s).
START_SLACK_S: Final = 1.0


@dataclass(frozen=True)
class KernelRule:
    """The rule's thresholds (config host.kernel_memory_error and the memory guard's debounced floor)."""

    policy: str = "kill"  # "kill" | "warn"
    #: "Near the floor": MemAvailable below this (GiB; 0 = the headroom never counts)
    near_floor_gib: float = 6.0
    storm_lines: int = STORM_LINES
    storm_window_s: float = STORM_WINDOW_S
    start_slack_s: float = START_SLACK_S


@dataclass(frozen=True)
class KernelLine:
    """One classified kernel line as one profile sees it."""

    kind: str
    whose: str  # ours | other | nobody
    ts: float  # wall time the kernel printed it (epoch s)
    backlog: bool = False  # printed before the follower opened the log (never judged)
    mem_available_gib: float | None = None  # the host's latest sample (None: none yet)


def phase_of(serving: bool, starting: bool, kv_sized: bool) -> str:
    """The phase of a profile with a container (serving and starting from its state)."""
    if serving:
        return SERVING
    if starting:
        return LOADING_SIZED if kv_sized else LOADING_PROFILE
    return OTHER_PHASE


def window(recent: tuple[float, ...], ts: float, window_s: float, cap: int) -> tuple[float, ...]:
    """The line times of ``recent`` within ``window_s`` before ``ts``, plus ``ts``; at most ``cap``."""
    kept = tuple(t for t in recent if ts - window_s < t <= ts)
    return (*kept, ts)[-cap:]


def judge(
    rule: KernelRule, phase: str, line: KernelLine, since: float | None, recent: tuple[float, ...]
) -> tuple[str, tuple[float, ...], str]:
    """``(verdict, recent lines naming nobody, why)`` for one line and one profile's container.

    ``since``: when the container started (wall time; None: unknown); ``recent``: kernel times of the
    lines naming nobody this container took lately (the rate), returned updated.
    """
    if since is not None and line.ts < since - rule.start_slack_s:
        return IGNORE, recent, "printed before the container started"
    if line.backlog:
        return REMEMBER, recent, "printed before the daemon read the log: recorded, not judged"
    if line.kind not in KILL_KINDS or line.whose == OTHER:
        return REMEMBER, recent, ""
    if line.whose == OURS:
        return (KILL if rule.policy == "kill" else REMEMBER), recent, "a process of this container"
    if line.whose != NOBODY or phase == OTHER_PHASE:
        return REMEMBER, recent, ""
    if phase != LOADING_PROFILE:
        return (KILL if rule.policy == "kill" else REMEMBER), recent, phase
    recent = window(recent, line.ts, rule.storm_window_s, rule.storm_lines + 1)
    low = (
        rule.near_floor_gib > 0
        and line.mem_available_gib is not None
        and line.mem_available_gib < rule.near_floor_gib
    )
    if low:
        why = (
            f"while loading with MemAvailable {line.mem_available_gib:.1f} GiB < {rule.near_floor_gib:g} GiB"
        )
        return (KILL if rule.policy == "kill" else REMEMBER), recent, why
    if len(recent) > rule.storm_lines:
        why = f"a storm: {len(recent)} lines in {rule.storm_window_s:g} s while loading"
        return (KILL if rule.policy == "kill" else REMEMBER), recent, why
    return TOLERATE, recent, "the memory profiler's probing: the host's memory is fine"

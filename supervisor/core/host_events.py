"""Inputs of the state machine about the host around a profile: the kernel log, /dev/shm, memory, orphans;
and :class:`KernelRecord`, what a profile's state keeps of the kernel lines (not an event).

Part of :mod:`supervisor.core.events` (re-exported there, and members of its ``Event`` union).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShmSwept:
    """The /dev/shm sweep before a start: segments removed, kept (held or unverified), memory regained."""

    removed: tuple[str, ...]
    freed_bytes: int
    kept: tuple[str, ...]
    warnings: tuple[str, ...]
    mem_gain_gib: float | None


@dataclass(frozen=True)
class KernelReport:
    """A classified kernel-log message (NVIDIA Xid, NV_ERR_NO_MEMORY, OOM kill...), seen by the follower.

    Handed to every profile: one that serves alerts on it, every one with a container remembers it for
    a failure that follows (the failure then names it as its kernel cause).
    """

    kind: str
    summary: str  # e.g. "Xid 31 (pid 4242 VLLM::EngineCor)", "NV_ERR_NO_MEMORY"
    line: str
    ts: float
    #: Whose process the line names (supervisor.core.host.attribution): ours | other | nobody.
    whose: str = "nobody"
    #: Printed before the daemon's follower opened the kernel log: recorded, never judged (no replay).
    backlog: bool = False
    #: MemAvailable of the host's latest memory sample when the line was read (None: none yet).
    mem_available_gib: float | None = None


@dataclass(frozen=True)
class HardFloor:
    """Host memory is below the memory guard's hard floor: kill every container of ours, no grace."""

    detail: str


@dataclass(frozen=True)
class ReserveMeasured:
    """MemAvailable right after the server became ready (for the host memory reserve)."""

    mem_available_gib: float | None


@dataclass(frozen=True)
class OrphanSeen:
    """A process that outlived a stopped container, and what was done to it."""

    pid: int
    name: str
    rss_bytes: int
    reason: str  # cgroup | vllm_title | gpu_device
    outcome: str  # reported | terminated | killed | gone | refused | survived | failed


@dataclass(frozen=True)
class HostAfterStop:
    """What the host looked like after a container of this profile went away.

    ``mem_before_gib``: MemAvailable before that container was created (None: adopted / unknown);
    ``mem_after_gib``: after it stopped (the job waits a little for it to come back).
    """

    container_id: str
    orphans: tuple[OrphanSeen, ...]
    mem_before_gib: float | None
    mem_after_gib: float | None


@dataclass(frozen=True)
class KernelRecord:
    """Kernel lines about this profile lately: the summaries a failure names, and the rate limit on warnings
    about other processes' lines (host/kernel_quiet.py)."""

    recent: tuple[str, ...] = ()  # summaries of kernel events seen lately (a failure names them)
    recent_at: float | None = None  # when the last of them was seen
    quiet_kinds: tuple[str, ...] = ()  # kinds of other processes' kernel lines warned about lately
    quiet_at: tuple[float, ...] = ()  # when each kind was last warned about
    quiet_held: tuple[int, ...] = ()  # lines of each kind held back since that warning
    load_lines: tuple[float, ...] = ()  # kernel times of lines naming nobody lately (the storm rate)

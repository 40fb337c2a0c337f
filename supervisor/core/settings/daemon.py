"""The daemon config's sections the machine reads: ``host`` (with ``host.memory_guard``), ``breaker``,
``backoff``, ``maintenance`` (the YAML's names; docs/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from supervisor.core.host.paths import DEFAULT_LOAD_LOCK


@dataclass(frozen=True)
class MemoryGuardConfig:
    """The debounced memory watchdog (docs/field-notes.md item 3)."""

    enabled: bool = True
    mem_available_min_gib: float = 6.0
    samples: int = 5  # consecutive bad samples (one every sample_interval_s) before acting
    memfree_min_gib: float = 2.0
    memavailable_below_gib: float = 10.0  # the MemFree rule applies only while MemAvailable is below this
    sample_interval_s: float = 1.0
    psi_full_avg10_max: float = 0.0  # memory PSI "full avg10" (%) above this is a bad sample; 0 = off
    #: The hard floor: one sample below it SIGKILLs every container of ours, no grace (0 = off) ...
    hard_mem_available_min_gib: float = 3.0
    #: ... as does MemFree below this while MemAvailable is below ``memavailable_below_gib`` (0 = off)
    hard_memfree_min_gib: float = 1.0


ORPHAN_POLICIES = ("report", "kill")
KERNEL_MEMORY_POLICIES = ("kill", "warn")


@dataclass(frozen=True)
class HostConfig:
    """Host guards around starts."""

    drop_caches: bool = True
    drop_caches_level: int = 1  # 1 page cache, 2 dentries/inodes, 3 both
    min_mem_available_gib: float = 0.0  # wait before start until MemAvailable >= this (0 = no wait)
    #: ``min_mem_available_gib: auto``: the floor of each start is its profile's gmu x MemTotal + reserve_gib
    min_mem_available_auto: bool = False
    settle_timeout_s: float = 300.0  # how long to wait for memory to recover
    load_lock_path: Path = DEFAULT_LOAD_LOCK  # flock: one model load per host (core/host/paths.py)
    memory_guard: MemoryGuardConfig = field(default_factory=MemoryGuardConfig)
    reserve_gib: float = 0.0  # warn when MemAvailable after a load is below this (0 = off; Thor: 15)
    #: The contiguity sentinel: warn under this many free 4 MiB blocks' worth in blocks >= 4 MiB (0 = off)
    contiguity_min_free_blocks: int = 256
    state_dir_min_free_gib: float = 1.0  # warn when the state directory's file system has less free (0 = off)
    orphans: str = "report"  # processes that outlived a container: "report" or "kill"
    #: NV_ERR_NO_MEMORY / nvmap / CMA ENOMEM / an OOM kill of ours while loading or serving: "kill" or "warn"
    kernel_memory_error: str = "kill"


@dataclass(frozen=True)
class BreakerConfig:
    """Circuit breaker: `limit` emergencies within `window_s` opens it."""

    limit: int = 3
    window_s: float = 7200.0
    realert_s: float = 1800.0  # re-alert while open


@dataclass(frozen=True)
class BackoffConfig:
    """Launch backoff: initial, doubling by `factor`, capped; reset after `reset_after_s` healthy."""

    initial_s: float = 1.0  # a crash is retried at once; the breaker stops a loop (the bash suite: 30 s)
    factor: float = 2.0
    max_s: float = 900.0
    reset_after_s: float = 600.0


@dataclass(frozen=True)
class MaintenanceConfig:
    """Weekly maintenance restart: standard crontab (docs/maintenance.md) in `timezone` (None: the host's)."""

    enabled: bool = True
    cron: str = "0 4 * * 0"
    drain_timeout_s: float = 600.0
    timezone: str | None = None
    catch_up_s: float = 21600.0  # a fire missed while the daemon was down still runs if at most this late

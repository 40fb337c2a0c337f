"""What the fleet step needs of the daemon config, as core values (built once by
:func:`supervisor.config.policy.fleet_policy_for`; a reload builds a new one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import tzinfo

from supervisor.core.fleet.heartbeat import DEFAULT_FAIL_AFTER_S
from supervisor.core.fleet.lifecycle import SETTLE_TIMEOUT_S
from supervisor.core.host.memguard import MemoryGuard
from supervisor.core.maintenance.schedule import CronSchedule
from supervisor.core.sentinel.judge import SentinelPolicy


@dataclass(frozen=True)
class MemoryRule:
    """The memory guard (``host.memory_guard``): the debounced floors (``guard``: its thresholds, streak 0)
    and the hard floor (no debounce, no grace; 0 = off). ``enabled`` False: samples are only shown."""

    enabled: bool = True
    guard: MemoryGuard = field(default_factory=MemoryGuard)
    hard_mem_available_min_gib: float = 3.0
    hard_memfree_min_gib: float = 1.0


@dataclass(frozen=True)
class Companion:
    """One companion of a profile (``profile.companions``), with the container row its alerts name."""

    profile: str
    name: str
    url: str
    expect_status: int = 200
    timeout_s: float = 5.0
    interval_s: float = 30.0
    container: str = ""

    @property
    def key(self) -> str:
        return f"{self.profile}/{self.name}"


@dataclass(frozen=True)
class Canary:
    """The performance sentinel of one profile (``sentinel:``, docs/sentinel.md), and its container's name."""

    profile: str
    container: str
    enabled: bool = True
    judge: SentinelPolicy = field(default_factory=SentinelPolicy)
    busy_retry_s: float = 30.0


@dataclass(frozen=True)
class MaintenanceRule:
    """Scheduled maintenance (``maintenance:``): the crontab in its zone (None: disabled), how late a fire
    missed while the daemon was down still runs, and the config's own words for the status."""

    schedule: CronSchedule | None = None
    catch_up_s: float = 21600.0
    cron: str = ""
    timezone: str | None = None


@dataclass(frozen=True)
class FleetPolicy:
    """The daemon-wide rules of one config."""

    memory: MemoryRule = field(default_factory=MemoryRule)
    maintenance: MaintenanceRule = field(default_factory=MaintenanceRule)
    companions: tuple[Companion, ...] = ()
    #: The dead-man heartbeat is configured, and how long a profile may want to run without serving.
    heartbeat: bool = False
    fail_after_s: float = DEFAULT_FAIL_AFTER_S
    #: ``alerts.digest_at`` as (hour, minute) in ``digest_tz`` (None: no daily digest).
    digest_at: tuple[int, int] | None = None
    digest_tz: tzinfo | None = None
    #: ``daemon.started`` waits this long at most for every profile's container to be looked at.
    settle_timeout_s: float = SETTLE_TIMEOUT_S
    #: ``host.state_dir_min_free_gib``: less free space on the state directory is a warning (0 = off).
    state_dir_min_free_gib: float = 1.0
    #: ``host.contiguity_min_free_blocks``: fewer free 4 MiB blocks is a warning (0 = off; docs/wedge.md).
    contiguity_min_free_blocks: int = 256
    #: Every profile's seat (None: it shares no port or GPU), in config order.
    seats: tuple[tuple[str, str | None], ...] = ()
    #: Every profile's performance sentinel, in config order.
    canaries: tuple[Canary, ...] = ()
    #: (label, kind) of every configured alert channel, in config order.
    channels: tuple[tuple[str, str], ...] = ()

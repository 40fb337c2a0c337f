"""What the fleet step needs of the daemon config, as core values (built once by
:func:`supervisor.config.policy.fleet_policy_for`; a reload builds a new one)."""

from __future__ import annotations

from dataclasses import dataclass, field

from supervisor.core.host.memguard import MemoryGuard


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
class FleetPolicy:
    """The daemon-wide rules of one config."""

    memory: MemoryRule = field(default_factory=MemoryRule)
    companions: tuple[Companion, ...] = ()

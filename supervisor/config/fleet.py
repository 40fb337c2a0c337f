"""The fleet step's policy of one daemon config: the one place that copies it (``host.memory_guard``, each
profile's ``companions``)."""

from __future__ import annotations

from supervisor.config.model import DaemonConfig
from supervisor.core.fleet.policy import Companion, FleetPolicy, MemoryRule
from supervisor.core.host.memguard import MemoryGuard


def fleet_policy_for(config: DaemonConfig) -> FleetPolicy:
    """The daemon-wide rules of ``config`` (built again after a reload)."""
    g = config.host.memory_guard
    memory = MemoryRule(
        enabled=g.enabled,
        guard=MemoryGuard(
            g.mem_available_min_gib,
            g.samples,
            g.memfree_min_gib,
            g.memavailable_below_gib,
            g.psi_full_avg10_max,
        ),
        hard_mem_available_min_gib=g.hard_mem_available_min_gib,
        hard_memfree_min_gib=g.hard_memfree_min_gib,
    )
    companions = tuple(
        Companion(p.name, c.name, c.url, c.expect_status, c.timeout_s, c.interval_s, p.container.name)
        for p in config.profiles
        for c in p.companions
    )
    return FleetPolicy(memory=memory, companions=companions)

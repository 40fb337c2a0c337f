"""The fleet step's policy of one daemon config: the one place that copies it (``host.memory_guard``, each
profile's ``companions``)."""

from __future__ import annotations

from supervisor.config.model import DaemonConfig
from supervisor.core.fleet.digest import parse_hhmm
from supervisor.core.fleet.policy import Canary, Companion, FleetPolicy, MaintenanceRule, MemoryRule
from supervisor.core.host.memguard import MemoryGuard
from supervisor.core.maintenance.schedule import CronSchedule, ScheduleError, zone


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
    canaries = tuple(
        Canary(p.name, p.container.name, p.sentinel.enabled, p.sentinel.policy(), p.sentinel.busy_retry_s)
        for p in config.profiles
    )
    digest_at = parse_hhmm(config.alerts.digest_at) if config.alerts.digest_at else None
    try:
        tz = zone(config.maintenance.timezone) if digest_at is not None else None
    except ScheduleError:  # the config check refuses this; never a daemon crash: no digest then
        digest_at, tz = None, None
    m = config.maintenance
    schedule = CronSchedule.parse(m.cron, m.timezone) if m.enabled else None  # (the config check parsed it)
    return FleetPolicy(
        memory=memory,
        maintenance=MaintenanceRule(schedule, m.catch_up_s, m.cron, m.timezone),
        companions=companions,
        heartbeat=config.heartbeat.enabled,
        fail_after_s=config.heartbeat.fail_after_s,
        digest_at=digest_at,
        digest_tz=tz,
        canaries=canaries,
        seats=tuple((p.name, p.seat) for p in config.profiles),
        state_dir_min_free_gib=config.host.state_dir_min_free_gib,
        contiguity_min_free_blocks=config.host.contiguity_min_free_blocks,
        channels=tuple(
            (c.name or c.kind, c.kind) for c in config.alerts.channels
        ),  # as the sender labels them
    )

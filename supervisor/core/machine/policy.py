"""Policy values of the state machine: the config's own sections under the YAML's names.

``policy.probes.interval_s`` is the profile's ``probes.interval_s``, ``policy.breaker.realert_s`` the daemon
config's ``breaker.realert_s``: a grep for a YAML key finds where the machine uses it. The sections are the
config's frozen values (:mod:`supervisor.core.settings`, the one home of every default);
``supervisor.config.policy.policy_for`` hands them over with the few values derived from the profile
(tests start from ``supervisor.config.policy.default_policy()``).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.settings.daemon import BackoffConfig, BreakerConfig, HostConfig, MaintenanceConfig
from supervisor.core.settings.profile import (
    KvPoolConfig,
    MarkerConfig,
    ProbeConfig,
    StartupConfig,
    StopConfig,
)
from supervisor.core.vllm.progress import EngineShape
from supervisor.core.vllm.smoke import GateSpec


@dataclass(frozen=True)
class Policy:
    """Timings and limits of one profile (every field given by ``policy_for``)."""

    # ---- the profile's sections
    probes: ProbeConfig
    startup: StartupConfig
    #: ``stop.drain_timeout_s`` bounds restart drains; maintenance drains use ``maintenance.drain_timeout_s``
    stop: StopConfig
    #: ``markers.expected`` must all appear before a start counts as ready (docs/field-notes.md item 7)
    markers: MarkerConfig
    #: KV-pool lottery (docs/kv-pool.md): the warning floor and drop, redraws, the pin
    kv_pool: KvPoolConfig
    #: Last known good (docs/operations.md): failed starts of a changed config before ``on_failed_change``
    rollback_after: int
    #: ... applies: "rollback" (start the last known good) or "hold" (alert only)
    on_failed_change: str
    #: Smoke gates run after the first generation of every start of ours (docs/operations.md "Smoke gates")
    smoke_gates: tuple[GateSpec, ...]
    # ---- the daemon config's sections
    breaker: BreakerConfig
    backoff: BackoffConfig
    #: ``host.reserve_gib`` (warn when MemAvailable after a load is below it) and
    #: ``host.kernel_memory_error`` ("kill" or "warn" on a kernel memory error of ours)
    host: HostConfig
    #: ``maintenance.drain_timeout_s``: maintenance drains, scheduled or ``maintenance --now``
    maintenance: MaintenanceConfig
    reboot_rearms_breaker: bool
    # ---- derived from the profile
    #: The profile configures an API key: a served keyless request is critical, else only a warning.
    api_key_configured: bool
    #: The key comes from a key file: compare it with the running container's key each probe round.
    watch_key_file: bool
    #: What bounds one engine step, from its vLLM arguments (core/vllm/progress.py).
    engine: EngineShape
    # ---- fixed timings (not config keys: config/policy.py names them)
    health_poll_s: float
    drain_poll_s: float
    #: Extra time after the stop grace before a stop is considered overdue and re-issued as a kill.
    stop_overdue_s: float
    #: Kernel events seen this long before a failure are named as its kernel cause.
    kernel_window_s: float
    #: Memory that did not come back after a stop: warn when MemAvailable stays this much below before.
    memory_return_tolerance_gib: float

    def urgent_grace_s(self) -> float:
        """SIGTERM -> SIGKILL of a stop with nothing to save (an emergency, a failed start): the emergency
        grace, capped by the planned one."""
        return min(self.stop.emergency_grace_s, self.stop.grace_s)

    def drain_s(self, maintenance: bool) -> float:
        """How long a drain waits for running requests: the maintenance or the restart bound."""
        return self.maintenance.drain_timeout_s if maintenance else self.stop.drain_timeout_s

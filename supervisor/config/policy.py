"""The machine's Policy of one profile, built from its parsed config: the one place that copies it.

Every default lives in the config's frozen dataclasses (``config.model``) and reaches the machine only
through :func:`policy_for`; :func:`default_policy` is the Policy of a profile and a daemon config that
set nothing, parsed by the real parser (what tests start from, overriding what they assume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from supervisor.config.daemon import parse_daemon
from supervisor.config.model import DaemonConfig, Profile
from supervisor.config.profile import parse_profile
from supervisor.config.reader import Ctx
from supervisor.core.errors import ConfigError
from supervisor.core.machine.policy import Policy
from supervisor.core.vllm.cmdline import argv_of, engine_shape
from supervisor.core.vllm.server_keys import key_expected

# Fixed timings of the machine (not config keys): named here, next to the copy of the config's values.
#: While STARTING after the ready line, ``/health`` is asked this often until it answers 200.
HEALTH_POLL_S: Final = 2.0
#: While DRAINING, the running-request count is read this often.
DRAIN_POLL_S: Final = 2.0
#: Extra time after the stop grace before a stop is considered overdue and re-issued as a kill.
STOP_OVERDUE_S: Final = 60.0
#: Kernel events seen this long before a failure are named as its kernel cause.
KERNEL_WINDOW_S: Final = 120.0
#: Memory that did not come back after a stop: warn when MemAvailable stays this much below before (GiB).
MEMORY_RETURN_TOLERANCE_GIB: Final = 2.0


def policy_for(profile: Profile, config: DaemonConfig) -> Policy:
    """The timings and limits the machine applies to ``profile``."""
    key = profile.api_key
    shape = engine_shape(argv_of(profile.container))
    return Policy(
        probe_interval_s=profile.probes.interval_s,
        failure_threshold=profile.probes.failure_threshold,
        stall_after_s=profile.probes.stall_after_s,
        freeze_after_s=profile.probes.freeze_after_s,
        canary_deadline_s=profile.probes.canary_deadline_s,
        cpu_busy_cores=profile.probes.cpu_busy_cores,
        step_factor=profile.probes.step_factor,
        default_prefill_rate=profile.probes.prefill_tokens_per_s,
        chunked_prefill=shape.chunked_prefill,
        max_num_batched_tokens=shape.max_num_batched_tokens,
        max_model_len=shape.max_model_len,
        startup_deadline_s=profile.startup.deadline_s,
        silence_timeout_s=profile.startup.silence_timeout_s,
        adopt_grace_s=profile.startup.adopt_grace_s,
        drain_timeout_s=profile.stop.drain_timeout_s,
        maintenance_drain_timeout_s=config.maintenance.drain_timeout_s,
        stop_grace_s=profile.stop.grace_s,
        emergency_grace_s=profile.stop.emergency_grace_s,
        breaker_limit=config.breaker.limit,
        breaker_window_s=config.breaker.window_s,
        backoff_initial_s=config.backoff.initial_s,
        backoff_factor=config.backoff.factor,
        backoff_max_s=config.backoff.max_s,
        backoff_reset_after_s=config.backoff.reset_after_s,
        reboot_rearms_breaker=config.reboot_rearms_breaker,
        fatal_realert_s=config.breaker.realert_s,
        auth_check=profile.probes.unauthorized_check,
        api_key_configured=key_expected(profile.api_key is not None, profile.container),
        watch_key_file=key is not None and key.file is not None and key.inject_env is not None,
        ready_requires_health=profile.startup.ready_requires_health,
        warmup_s=profile.probes.warmup_s,
        health_poll_s=HEALTH_POLL_S,
        drain_poll_s=DRAIN_POLL_S,
        expected_markers=profile.markers.expected_names(),
        stop_overdue_s=STOP_OVERDUE_S,
        kernel_window_s=KERNEL_WINDOW_S,
        reserve_gib=config.host.reserve_gib,
        memory_return_tolerance_gib=MEMORY_RETURN_TOLERANCE_GIB,
        saturation_grace=profile.probes.saturation_grace,
        liveness_generation=profile.probes.generation,
        kv_warn_below_tokens=profile.kv_pool.warn_below_tokens or None,
        kv_warn_drop_pct=profile.kv_pool.warn_drop_pct,
        kv_min_tokens=profile.kv_pool.min_tokens,
        kv_max_redraws=profile.kv_pool.max_redraws,
        rollback_after=profile.rollback_after,
        on_failed_change=profile.on_failed_change,
        smoke_gates=tuple(g.spec() for g in profile.smoke.gates),
        kernel_memory_error=config.host.kernel_memory_error,
        kv_pin=profile.kv_pool.pin,
    )


#: The smallest profile the parser accepts: a container image and nothing else.
_BARE_PROFILE: Final = {"container": {"image": "vllm/vllm-openai"}}


def default_config() -> tuple[Profile, DaemonConfig]:
    """A profile and a daemon config that set nothing but the required image, parsed by the real parser."""
    ctx = Ctx(file="<defaults>", base_dir=Path("/"))
    profile = parse_profile(ctx, _BARE_PROFILE, Path("/default.yaml"))
    config = parse_daemon(ctx, {"profiles": []}, Path("/daemon.yaml"))
    if profile is None or config is None or ctx.problems:
        raise ConfigError(ctx.problems)
    return profile, config


def default_policy() -> Policy:
    """The Policy of a profile and daemon config that set nothing (every value a config default)."""
    return policy_for(*default_config())

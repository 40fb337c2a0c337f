"""Build the state machine's :class:`Policy` for one profile from the parsed configuration (pure)."""

from __future__ import annotations

from supervisor.config import DaemonConfig, Profile
from supervisor.core.machine.policy import Policy


def policy_for(profile: Profile, config: DaemonConfig) -> Policy:
    """The timings and limits the machine applies to ``profile``."""
    return Policy(
        probe_interval_s=profile.probes.interval_s,
        failure_threshold=profile.probes.failure_threshold,
        stall_after_s=profile.probes.stall_after_s,
        startup_deadline_s=profile.startup.deadline_s,
        silence_timeout_s=profile.startup.silence_timeout_s,
        adopt_grace_s=profile.startup.adopt_grace_s,
        drain_timeout_s=profile.stop.drain_timeout_s,
        stop_grace_s=profile.stop.grace_s,
        breaker_limit=config.breaker.limit,
        breaker_window_s=config.breaker.window_s,
        backoff_initial_s=config.backoff.initial_s,
        backoff_factor=config.backoff.factor,
        backoff_max_s=config.backoff.max_s,
        backoff_reset_after_s=config.backoff.reset_after_s,
        reboot_rearms_breaker=config.reboot_rearms_breaker,
        fatal_realert_s=config.breaker.realert_s,
        auth_required=profile.api_key is not None and profile.probes.unauthorized_check,
        expected_markers=profile.markers.expected,
    )

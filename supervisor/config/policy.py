"""The machine's Policy of one profile, built from its parsed config: its sections handed over as they are.

Every default lives in the config's frozen dataclasses (``core.settings``, ``config.model``) and reaches the
machine only through :func:`policy_for`; :func:`default_policy` is the Policy of a profile and a daemon config
that set nothing, parsed by the real parser (what tests start from, overriding what they assume).
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

# Fixed timings of the machine (not config keys): named here, where the Policy is built.
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
    return Policy(
        probes=profile.probes,
        startup=profile.startup,
        stop=profile.stop,
        markers=profile.markers,
        kv_pool=profile.kv_pool,
        rollback_after=profile.rollback_after,
        on_failed_change=profile.on_failed_change,
        smoke_gates=tuple(g.spec() for g in profile.smoke.gates),
        breaker=config.breaker,
        backoff=config.backoff,
        host=config.host,
        maintenance=config.maintenance,
        reboot_rearms_breaker=config.reboot_rearms_breaker,
        api_key_configured=key_expected(profile.api_key is not None, profile.container),
        watch_key_file=key is not None and key.file is not None and key.inject_env is not None,
        engine=engine_shape(argv_of(profile.container)),
        health_poll_s=HEALTH_POLL_S,
        drain_poll_s=DRAIN_POLL_S,
        stop_overdue_s=STOP_OVERDUE_S,
        kernel_window_s=KERNEL_WINDOW_S,
        memory_return_tolerance_gib=MEMORY_RETURN_TOLERANCE_GIB,
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

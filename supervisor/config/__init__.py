"""Configuration: frozen dataclasses for the daemon config and profiles, and their parser."""

from supervisor.config.load import check_config, cli_check_config, load_config, load_profile
from supervisor.config.model import (
    ALERT_KINDS,
    AlertChannel,
    AlertsConfig,
    ApiKeySource,
    CompanionConfig,
    DaemonConfig,
    HeartbeatConfig,
    Profile,
)
from supervisor.core.settings.daemon import (
    BackoffConfig,
    BreakerConfig,
    HostConfig,
    MaintenanceConfig,
    MemoryGuardConfig,
)
from supervisor.core.settings.profile import (
    KvPoolConfig,
    MarkerConfig,
    ProbeConfig,
    StartupConfig,
    StopConfig,
)
from supervisor.core.spec.shape import (
    container_create_kwargs,
    container_host_config,
    container_spec_to_yaml_dict,
)

__all__ = [
    "ALERT_KINDS",
    "AlertChannel",
    "AlertsConfig",
    "ApiKeySource",
    "BackoffConfig",
    "BreakerConfig",
    "CompanionConfig",
    "DaemonConfig",
    "HeartbeatConfig",
    "HostConfig",
    "KvPoolConfig",
    "MaintenanceConfig",
    "MarkerConfig",
    "MemoryGuardConfig",
    "ProbeConfig",
    "Profile",
    "StartupConfig",
    "StopConfig",
    "check_config",
    "cli_check_config",
    "container_create_kwargs",
    "container_host_config",
    "container_spec_to_yaml_dict",
    "load_config",
    "load_profile",
]

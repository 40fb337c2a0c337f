"""The typed, frozen shape of a daemon config and of a profile (parsed once, read everywhere).

The field defaults below and in the sections the machine reads (:mod:`supervisor.core.settings`) are the
product's only defaults: the parser (``config.profile``,
``config.daemon``) falls back to them and the machine's Policy is copied from them
(``config.policy.policy_for``); nothing else restates them. Where one differs from the bash suite of
docs/field-notes.md, its comment says why.
Secret material (URLs with tokens, webhook secrets, API keys) never appears in ``repr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from supervisor.config.sentinel import SentinelConfig
from supervisor.config.smoke import SmokeConfig
from supervisor.core.settings.daemon import (
    BackoffConfig,
    BreakerConfig,
    HostConfig,
    MaintenanceConfig,
)
from supervisor.core.settings.profile import (
    KvPoolConfig,
    MarkerConfig,
    ProbeConfig,
    StartupConfig,
    StopConfig,
)
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.cmdline import API_KEY_ENV

AlertKind = Literal["feishu", "dingtalk", "wecom", "slack", "discord", "telegram", "generic"]
ALERT_KINDS: tuple[str, ...] = ("feishu", "dingtalk", "wecom", "slack", "discord", "telegram", "generic")
DEFAULT_API_KEY_ENV = API_KEY_ENV


@dataclass(frozen=True)
class ApiKeySource:
    """Where the server's API key comes from: a container env var, or a 0600 file (see adapters.secrets)."""

    env: str | None = None  # name of a container env var holding the key (e.g. VLLM_API_KEY)
    file: Path | None = None  # a file holding the key (must not be group/world readable)
    inject_env: str | None = DEFAULT_API_KEY_ENV  # with `file`: pass the key into the container as this var
    generate: bool = False  # with `file`: create a missing file (random key, 0600)
    inject_arg: str | None = None  # with `file`: the key is the value of this command flag (`--api-key`)


@dataclass(frozen=True)
class CompanionConfig:
    """A service next to the model server (e.g. the API gateway in front of vLLM) the daemon only checks:
    failures show in status and alert; the daemon never restarts it (it does not own it)."""

    name: str
    url: str
    expect_status: int = 200
    timeout_s: float = 5.0
    interval_s: float = 30.0


@dataclass(frozen=True)
class Profile:
    """One supervised model server."""

    name: str
    source: Path
    container: ContainerSpec
    base_url: str = "http://127.0.0.1:8000"
    served_model_name: str | None = None
    api_key: ApiKeySource | None = None
    probes: ProbeConfig = field(default_factory=ProbeConfig)
    startup: StartupConfig = field(default_factory=StartupConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    markers: MarkerConfig = field(default_factory=MarkerConfig)
    kv_pool: KvPoolConfig = field(default_factory=KvPoolConfig)
    autostart: bool = True
    companions: tuple[CompanionConfig, ...] = ()
    #: Profiles of one seat (one port, one GPU) never run at once: starting one stops the other.
    seat: str | None = None
    #: Failed starts in a row of a changed config before ``on_failed_change`` applies (last known good).
    rollback_after: int = 2
    on_failed_change: Literal["rollback", "hold"] = "hold"
    smoke: SmokeConfig = field(default_factory=SmokeConfig)
    sentinel: SentinelConfig = field(default_factory=SentinelConfig)  # the performance canary


@dataclass(frozen=True)
class AlertChannel:
    """One chat/webhook destination. URL and secret are secrets: never in repr."""

    kind: AlertKind
    name: str = ""
    url: str | None = field(default=None, repr=False)
    url_file: Path | None = None
    secret: str | None = field(default=None, repr=False)
    secret_file: Path | None = None
    chat_id: str | None = None  # telegram
    language: str | None = None  # this channel's language; None: alerts.language
    #: An HTTP(S) proxy for this channel only; the environment's proxies and ~/.netrc are never used.
    proxy: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class AlertsConfig:
    """Alert channels; an identical message is dropped for `dedupe_s`; a daily digest at `digest_at`;
    titles, labels and "what to do" in `language` (one of core.catalog.LANGUAGES)."""

    channels: tuple[AlertChannel, ...] = ()
    dedupe_s: float = 900.0
    digest_at: str | None = None  # "HH:MM" in maintenance.timezone (else the host's zone); None: no digest
    language: str = "en"


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus endpoint (``metrics:``): absent from the config means no endpoint."""

    host: str
    port: int
    allow_remote: bool = False

    @property
    def listen(self) -> str:
        """``HOST:PORT`` as written for MetricsServer (IPv6 in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class HeartbeatConfig:
    """Dead-man switch: ping `url` every `interval_s` (None = disabled); the failure URL while a profile is
    FATAL or has not served for `fail_after_s` (docs/alerts.md "Heartbeat")."""

    url: str | None = field(default=None, repr=False)
    url_file: Path | None = None
    interval_s: float = 300.0
    fail_after_s: float = 1800.0  # the default startup.deadline_s: a slow normal load stays green
    fail_path: str = "/fail"  # appended to the URL's path for a failure ping (healthchecks.io); "": none
    fail_url: str | None = field(default=None, repr=False)  # a whole failure URL instead (Uptime Kuma)
    fail_url_file: Path | None = None

    @property
    def fails(self) -> bool:
        """Whether failures are pinged to a failure URL (else the normal URL gets them, with the reason)."""
        return bool(self.fail_path) or self.fail_url is not None or self.fail_url_file is not None

    @property
    def enabled(self) -> bool:
        """Whether a heartbeat destination is configured."""
        return self.url is not None or self.url_file is not None


@dataclass(frozen=True)
class DaemonConfig:
    """The daemon config file, with every profile it lists already parsed."""

    path: Path
    state_dir: Path
    socket_path: Path
    restore_dir: Path
    socket_mode: int = 0o660
    socket_group: str | None = None
    log_level: str = "info"
    profiles: tuple[Profile, ...] = ()
    host: HostConfig = field(default_factory=HostConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    backoff: BackoffConfig = field(default_factory=BackoffConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    reboot_rearms_breaker: bool = False
    metrics: MetricsConfig | None = None  # None: no Prometheus endpoint

    def profile(self, name: str) -> Profile:
        """The profile called `name` (KeyError if none)."""
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(name)

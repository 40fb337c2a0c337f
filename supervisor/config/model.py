"""The typed, frozen shape of a daemon config and of a profile (parsed once, read everywhere).

Defaults follow the bash suite of DOMAIN.md: probe once a minute, 5 failures -> emergency, 3 emergencies in
2 h -> breaker, backoff 30 s doubling capped at 15 min, 15 min grace for an adopted container, launch
deadline 30 min, maintenance Sunday 04:00 with a 600 s drain, memory watchdog 6 GiB x 5 samples.
Secret material (URLs with tokens, webhook secrets, API keys) never appears in ``repr``.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from supervisor.core.spec import ContainerSpec, EnvVar

AlertKind = Literal["feishu", "dingtalk", "wecom", "slack", "discord", "telegram", "generic"]
ALERT_KINDS: tuple[str, ...] = ("feishu", "dingtalk", "wecom", "slack", "discord", "telegram", "generic")
DEFAULT_API_KEY_ENV = "VLLM_API_KEY"


def _read_secret_file(path: Path) -> str:
    """The content of a secret file with surrounding whitespace (the trailing newline) removed."""
    return path.read_text(encoding="utf-8").strip()


def _inline_or_file(value: str | None, path: Path | None) -> str | None:
    """`value` if set, else the content of `path` read now (None if neither, or the file is empty)."""
    if value is not None:
        return value
    if path is not None:
        return _read_secret_file(path) or None
    return None


@dataclass(frozen=True)
class ApiKeySource:
    """Where the server's API key comes from: a container env var, or a 0600 file read at call time."""

    env: str | None = None  # name of a container env var holding the key (e.g. VLLM_API_KEY)
    file: Path | None = None  # a file holding the key (must not be group/world readable)
    inject_env: str | None = DEFAULT_API_KEY_ENV  # with `file`: pass the key into the container as this var
    generate: bool = False  # with `file`: a missing file is created (random key, mode 0600) by ensure_file()

    def ensure_file(self) -> bool:
        """With `generate`, create a missing key file (0600 from the first byte); True if created."""
        if self.file is None or not self.generate:
            return False
        self.file.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
        return True

    def container_spec(self, spec: ContainerSpec) -> ContainerSpec:
        """`spec` with the key from `file` injected as env `inject_env` (unchanged otherwise). Secret!"""
        if self.file is None or not self.inject_env:
            return spec
        key = self.resolve(spec)
        if key is None:
            return spec
        env = (*(e for e in spec.env if e.name != self.inject_env), EnvVar(self.inject_env, key))
        return dataclasses.replace(spec, env=env)

    def resolve(self, spec: ContainerSpec) -> str | None:
        """The key value (never log it): from the file if set, else from the spec's environment."""
        if self.file is not None:
            try:
                return _read_secret_file(self.file) or None
            except OSError:
                return None
        if self.env is not None:
            return spec.env_dict().get(self.env) or None
        return None


@dataclass(frozen=True)
class ProbeConfig:
    """How a RUNNING server is checked."""

    interval_s: float = 15.0  # x failure_threshold = 60 s: DESIGN.md target for a dead or stuck engine
    timeout_s: float = 30.0
    failure_threshold: int = 4
    health_path: str = "/health"
    generation: bool = True
    generation_kind: Literal["chat", "completion"] = "chat"
    prompt: str = "ping"
    max_tokens: int = 16
    stall_after_s: float = 120.0  # requests running but generation counter not moving this long
    saturation_grace: bool = True  # a full server (queue busy, tokens moving) is not a failure
    metrics: bool = True
    warmup_s: float = 300.0  # measurements in the first minutes after ready do not count for perf
    unauthorized_check: bool = True  # after every start a request WITHOUT the key must get 401


@dataclass(frozen=True)
class StartupConfig:
    """How a start is judged."""

    deadline_s: float = 1800.0  # hard cap from create to ready
    silence_timeout_s: float = 600.0  # fail if the log shows no progress this long
    adopt_grace_s: float = 900.0  # a running container the daemon did not start: no probes this long
    ready_requires_health: bool = True


@dataclass(frozen=True)
class StopConfig:
    """How a server is stopped."""

    grace_s: float = 120.0  # SIGTERM -> SIGKILL; defaults to container.stop_timeout
    drain_timeout_s: float = 600.0  # wait for running requests to finish (bounded)


@dataclass(frozen=True)
class MarkerConfig:
    """Log markers: each `expected` regex must appear before ready; any `forbidden` one fails the start."""

    expected: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()


@dataclass(frozen=True)
class KvPoolConfig:
    """KV pool policy: warn when a start gets a pool this small, or this much below the median."""

    warn_below_tokens: int | None = None
    warn_drop_pct: float = 20.0


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
    env_files: tuple[Path, ...] = ()  # the env files the container env was read from (for snapshots)

    def container_spec(self) -> ContainerSpec:
        """The spec to create: `container` plus the API key injected from its file, if configured."""
        return self.api_key.container_spec(self.container) if self.api_key is not None else self.container


@dataclass(frozen=True)
class MemoryGuardConfig:
    """The debounced memory watchdog (DOMAIN item 3)."""

    enabled: bool = True
    mem_available_min_gib: float = 6.0
    samples: int = 5  # consecutive 1 s samples below the limit before acting
    memfree_min_gib: float = 2.0
    memavailable_below_gib: float = 10.0  # the MemFree rule applies only while MemAvailable is below this
    sample_interval_s: float = 1.0


@dataclass(frozen=True)
class HostConfig:
    """Host guards around starts."""

    drop_caches: bool = True
    drop_caches_level: int = 1  # 1 page cache, 2 dentries/inodes, 3 both
    min_mem_available_gib: float = 0.0  # wait before start until MemAvailable >= this (0 = no wait)
    settle_timeout_s: float = 300.0  # how long to wait for memory to recover
    load_lock_path: Path = Path("/run/lock/vllm-supervisor.load.lock")  # flock: one model load per host
    memory_guard: MemoryGuardConfig = field(default_factory=MemoryGuardConfig)


@dataclass(frozen=True)
class BreakerConfig:
    """Circuit breaker: `limit` emergencies within `window_s` opens it."""

    limit: int = 3
    window_s: float = 7200.0
    realert_s: float = 1800.0  # re-alert while open


@dataclass(frozen=True)
class BackoffConfig:
    """Launch backoff: initial, doubling by `factor`, capped; reset after `reset_after_s` healthy."""

    initial_s: float = 30.0
    factor: float = 2.0
    max_s: float = 900.0
    reset_after_s: float = 600.0


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

    def resolve_url(self) -> str | None:
        """The URL (inline or read from `url_file` now)."""
        return _inline_or_file(self.url, self.url_file)

    def resolve_secret(self) -> str | None:
        """The signing secret (inline or read from `secret_file` now), if any."""
        return _inline_or_file(self.secret, self.secret_file)


@dataclass(frozen=True)
class AlertsConfig:
    """Alert channels; an identical message is dropped for `dedupe_s`."""

    channels: tuple[AlertChannel, ...] = ()
    dedupe_s: float = 900.0


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
    """Dead-man switch: ping `url` every `interval_s` (None = disabled)."""

    url: str | None = field(default=None, repr=False)
    url_file: Path | None = None
    interval_s: float = 300.0

    @property
    def enabled(self) -> bool:
        """Whether a heartbeat destination is configured."""
        return self.url is not None or self.url_file is not None

    def resolve_url(self) -> str | None:
        """The URL (inline or read from `url_file` now)."""
        return _inline_or_file(self.url, self.url_file)


@dataclass(frozen=True)
class MaintenanceConfig:
    """Weekly maintenance restart (standard 5-field cron, local time)."""

    enabled: bool = True
    cron: str = "0 4 * * 0"
    drain_timeout_s: float = 600.0


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

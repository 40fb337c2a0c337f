"""The typed, frozen shape of a daemon config and of a profile (parsed once, read everywhere).

The field defaults below are the product's only defaults: the parser (``config.profile``,
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
from supervisor.core.paths import DEFAULT_LOAD_LOCK
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.cmdline import API_KEY_ENV
from supervisor.core.vllm.markers import marker_names

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
class ProbeConfig:
    """How a RUNNING server is checked."""

    interval_s: float = 5.0  # cheap rounds (/health, /metrics, cgroup CPU): a freeze is acted on in < 30 s
    timeout_s: float = 30.0
    failure_threshold: int = 4
    health_path: str = "/health"
    generation: bool = True
    generation_kind: Literal["chat", "completion"] = "chat"
    prompt: str = "ping"
    max_tokens: int = 16
    stall_after_s: float = 120.0  # floor of the longest legitimate step (counters flat, work present)
    freeze_after_s: float = 15.0  # work present, counters AND container CPU time flat this long: frozen
    canary_deadline_s: float = 10.0  # idle canary counted nowhere this long / /health failing this long
    cpu_busy_cores: float = 0.2  # the container steps when it used at least this many cores
    step_factor: float = 2.0  # longest step = factor x step tokens / prefill rate
    prefill_tokens_per_s: float = 100.0  # the prefill rate assumed until one is learned
    saturation_grace: bool = True  # a full server (queue busy, tokens moving) is not a failure
    metrics: bool = True
    warmup_s: float = 300.0  # measurements in the first minutes after ready do not count for perf
    unauthorized_check: bool = True  # after every start a request WITHOUT the key must get 401


@dataclass(frozen=True)
class StartupConfig:
    """How a start is judged."""

    deadline_s: float = 1800.0  # hard cap from create to ready
    silence_timeout_s: float = 1200.0  # fail if no log line, no CPU and no block IO this long (field: 881 s)
    adopt_grace_s: float = 900.0  # a running container the daemon did not start: no probes this long
    ready_requires_health: bool = True


@dataclass(frozen=True)
class StopConfig:
    """How a server is stopped."""

    grace_s: float = 120.0  # SIGTERM -> SIGKILL; defaults to container.stop_timeout
    #: SIGTERM -> SIGKILL of an emergency stop (stuck or dead engine, memory guard): nothing is left to
    #: drain, and vLLM's own shutdown waits ~30 s on a frozen engine (measured on 0.32)
    emergency_grace_s: float = 10.0
    drain_timeout_s: float = 600.0  # wait for running requests to finish (bounded)


@dataclass(frozen=True)
class MarkerConfig:
    """Log markers: each `expected` regex must appear before ready; any `forbidden` one fails the start."""

    expected: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    #: Lines each `expected` regex must match, at least (same order; empty = 1 each): `{pattern, count}`.
    expected_counts: tuple[int, ...] = ()

    def expected_names(self) -> tuple[str, ...]:
        """The names of the expected markers (the pattern, `` xN`` added for a count above 1)."""
        return marker_names(self.expected, self.expected_counts)


@dataclass(frozen=True)
class KvPoolConfig:
    """KV pool policy (docs/kv-pool.md): warn below a floor or this far under the earlier starts' median;
    optionally restart a start whose pool is under `min_tokens` to draw again, at most `max_redraws` in a row.
    """

    warn_below_tokens: int | None = None
    warn_drop_pct: float = 20.0
    min_tokens: int | None = None  # None = never redraw
    max_redraws: int = 2  # only used with min_tokens; each redraw costs one model load
    #: off | advise (a bad pool's alert names a --kv-cache-memory-bytes from the best draw) | apply (and
    #: the next starts add it to the command)
    pin: Literal["off", "advise", "apply"] = "off"


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
class MemoryGuardConfig:
    """The debounced memory watchdog (docs/field-notes.md item 3)."""

    enabled: bool = True
    mem_available_min_gib: float = 6.0
    samples: int = 5  # consecutive bad samples (one every sample_interval_s) before acting
    memfree_min_gib: float = 2.0
    memavailable_below_gib: float = 10.0  # the MemFree rule applies only while MemAvailable is below this
    sample_interval_s: float = 1.0
    psi_full_avg10_max: float = 0.0  # memory PSI "full avg10" (%) above this is a bad sample; 0 = off
    #: The hard floor: one sample below it SIGKILLs every container of ours, no grace (0 = off) ...
    hard_mem_available_min_gib: float = 3.0
    #: ... as does MemFree below this while MemAvailable is below ``memavailable_below_gib`` (0 = off)
    hard_memfree_min_gib: float = 1.0


ORPHAN_POLICIES = ("report", "kill")
KERNEL_MEMORY_POLICIES = ("kill", "warn")


@dataclass(frozen=True)
class HostConfig:
    """Host guards around starts."""

    drop_caches: bool = True
    drop_caches_level: int = 1  # 1 page cache, 2 dentries/inodes, 3 both
    min_mem_available_gib: float = 0.0  # wait before start until MemAvailable >= this (0 = no wait)
    #: ``min_mem_available_gib: auto``: the floor of each start is its profile's gmu x MemTotal + reserve_gib
    min_mem_available_auto: bool = False
    settle_timeout_s: float = 300.0  # how long to wait for memory to recover
    load_lock_path: Path = DEFAULT_LOAD_LOCK  # flock: one model load per host (core/paths.py)
    memory_guard: MemoryGuardConfig = field(default_factory=MemoryGuardConfig)
    reserve_gib: float = 0.0  # warn when MemAvailable after a load is below this (0 = off; Thor: 15)
    orphans: str = "report"  # processes that outlived a container: "report" or "kill"
    #: NV_ERR_NO_MEMORY / nvmap / CMA ENOMEM / an OOM kill of ours while loading or serving: "kill" or "warn"
    kernel_memory_error: str = "kill"


@dataclass(frozen=True)
class BreakerConfig:
    """Circuit breaker: `limit` emergencies within `window_s` opens it."""

    limit: int = 3
    window_s: float = 7200.0
    realert_s: float = 1800.0  # re-alert while open


@dataclass(frozen=True)
class BackoffConfig:
    """Launch backoff: initial, doubling by `factor`, capped; reset after `reset_after_s` healthy."""

    initial_s: float = 1.0  # a crash is retried at once; the breaker stops a loop (the bash suite: 30 s)
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
class MaintenanceConfig:
    """Weekly maintenance restart: standard crontab (docs/maintenance.md) in `timezone` (None: the host's)."""

    enabled: bool = True
    cron: str = "0 4 * * 0"
    drain_timeout_s: float = 600.0
    timezone: str | None = None
    catch_up_s: float = 21600.0  # a fire missed while the daemon was down still runs if at most this late


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

"""Policy values of the state machine (built by the daemon from the profile and daemon config)."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.smoke import GateSpec


@dataclass(frozen=True)
class Policy:
    """Timings and limits; defaults are the bash suite's, improved where docs/field-notes.md says so."""

    probe_interval_s: float = 15.0
    failure_threshold: int = 4
    stall_after_s: float = 120.0
    startup_deadline_s: float = 1800.0
    silence_timeout_s: float = 600.0
    adopt_grace_s: float = 900.0
    drain_timeout_s: float = 600.0  # restart drains (the profile's stop.drain_timeout_s)
    #: Maintenance drains, scheduled or ``maintenance --now`` (the daemon's maintenance.drain_timeout_s).
    maintenance_drain_timeout_s: float = 600.0
    stop_grace_s: float = 120.0
    emergency_grace_s: float = 10.0  # an emergency stop's SIGTERM -> SIGKILL (capped by stop_grace_s)
    breaker_limit: int = 3
    breaker_window_s: float = 7200.0
    backoff_initial_s: float = 1.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 900.0
    backoff_reset_after_s: float = 600.0
    reboot_rearms_breaker: bool = True
    fatal_realert_s: float = 1800.0
    #: After every start a request without the key is tried (``probes.unauthorized_check``).
    auth_check: bool = True
    #: The profile configures an API key: a served keyless request is critical, else only a warning.
    api_key_configured: bool = False
    #: The key comes from a key file: compare it with the running container's key each probe round.
    watch_key_file: bool = False
    #: Ready needs ``/health`` 200 after the startup line; False: the startup line alone (then the
    #: first generation, as always).
    ready_requires_health: bool = True
    #: Probe latencies in the first seconds after ready are not recorded as performance (cold start).
    warmup_s: float = 0.0
    health_poll_s: float = 2.0
    drain_poll_s: float = 2.0
    #: Log markers that must all appear before a start counts as ready (docs/field-notes.md item 7).
    expected_markers: tuple[str, ...] = ()
    #: Extra time after the stop grace before a stop is considered overdue and re-issued as a kill.
    stop_overdue_s: float = 60.0
    #: Kernel events seen this long before a failure are named as its kernel cause.
    kernel_window_s: float = 120.0
    #: Warn when MemAvailable after a load is below this (GiB; 0 = off; the field rule on Thor is 15).
    reserve_gib: float = 0.0
    #: Memory that did not come back after a stop: warn when MemAvailable stays this much below before.
    memory_return_tolerance_gib: float = 2.0
    #: A failed round whose tokens moved while requests queued is saturation, not a failure.
    saturation_grace: bool = True
    #: Send a real generation every probe round (config probes.generation; without it only /health and the
    #: stall rule on /metrics judge liveness, and a frozen engine core with an idle queue goes unseen).
    liveness_generation: bool = True
    #: Work present and no progress signal (the container's CPU time included) moving this long: frozen.
    freeze_after_s: float = 15.0
    #: Our canary (sent only when the server looks idle) unanswered this long with the engine showing no
    #: work at all: the engine never saw it (frozen while idle). Also how long /health may fail in a row.
    canary_deadline_s: float = 10.0
    #: The container counts as stepping when it used at least this many cores since the last round.
    cpu_busy_cores: float = 0.2
    #: The longest legitimate step: ``step_factor x longest-step tokens / prefill rate`` (at least
    #: ``stall_after_s``); the engine's shape comes from its vLLM arguments (core/vllm/progress.py).
    step_factor: float = 2.0
    chunked_prefill: bool = True
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    #: Prompt tokens/s assumed until the daemon has learned this config's rate.
    default_prefill_rate: float = 100.0
    #: KV-pool lottery (docs/kv-pool.md): warn below this many tokens (None: no floor) ...
    kv_warn_below_tokens: int | None = None
    #: ... or more than this many percent under the baseline of the earlier starts of the same config
    kv_warn_drop_pct: float = 20.0
    #: Redraw (restart, not a breaker failure) a pool under this many tokens (None: never) ...
    kv_min_tokens: int | None = None
    #: ... at most this many times in a row, then serve and warn
    kv_max_redraws: int = 2
    #: Last known good (docs/operations.md): failed starts of a changed config before ``on_failed_change``
    rollback_after: int = 2
    #: ... applies: "rollback" (start the last known good) or "hold" (alert only)
    on_failed_change: str = "hold"
    #: Smoke gates run after the first generation of every start of ours (docs/operations.md "Smoke gates")
    smoke_gates: tuple[GateSpec, ...] = ()

    def drain_s(self, maintenance: bool) -> float:
        """How long a drain waits for running requests: the maintenance or the restart bound."""
        return self.maintenance_drain_timeout_s if maintenance else self.drain_timeout_s

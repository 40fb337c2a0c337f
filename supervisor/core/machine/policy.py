"""Policy values of the state machine: built from the parsed profile and daemon config only.

The fields have no defaults here on purpose: the config's frozen dataclasses (``supervisor.config.model``)
are the one home of every default, and ``supervisor.config.policy.policy_for`` copies them in (tests start
from ``supervisor.config.policy.default_policy()``).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.core.smoke import GateSpec


@dataclass(frozen=True)
class Policy:
    """Timings and limits of one profile (every field given by ``policy_for``)."""

    probe_interval_s: float
    failure_threshold: int
    stall_after_s: float
    startup_deadline_s: float
    silence_timeout_s: float
    adopt_grace_s: float
    drain_timeout_s: float  # restart drains (the profile's stop.drain_timeout_s)
    #: Maintenance drains, scheduled or ``maintenance --now`` (the daemon's maintenance.drain_timeout_s).
    maintenance_drain_timeout_s: float
    stop_grace_s: float
    emergency_grace_s: float  # an emergency stop's SIGTERM -> SIGKILL (capped by stop_grace_s)
    breaker_limit: int
    breaker_window_s: float
    backoff_initial_s: float
    backoff_factor: float
    backoff_max_s: float
    backoff_reset_after_s: float
    reboot_rearms_breaker: bool
    fatal_realert_s: float
    #: After every start a request without the key is tried (``probes.unauthorized_check``).
    auth_check: bool
    #: The profile configures an API key: a served keyless request is critical, else only a warning.
    api_key_configured: bool
    #: The key comes from a key file: compare it with the running container's key each probe round.
    watch_key_file: bool
    #: Ready needs ``/health`` 200 after the startup line; False: the startup line alone (then the
    #: first generation, as always).
    ready_requires_health: bool
    #: Probe latencies in the first seconds after ready are not recorded as performance (cold start).
    warmup_s: float
    health_poll_s: float
    drain_poll_s: float
    #: Log markers that must all appear before a start counts as ready (docs/field-notes.md item 7).
    expected_markers: tuple[str, ...]
    #: Extra time after the stop grace before a stop is considered overdue and re-issued as a kill.
    stop_overdue_s: float
    #: Kernel events seen this long before a failure are named as its kernel cause.
    kernel_window_s: float
    #: Warn when MemAvailable after a load is below this (GiB; 0 = off; the field rule on Thor is 15).
    reserve_gib: float
    #: Memory that did not come back after a stop: warn when MemAvailable stays this much below before.
    memory_return_tolerance_gib: float
    #: A failed round whose tokens moved while requests queued is saturation, not a failure.
    saturation_grace: bool
    #: Send a real generation every probe round (config probes.generation; without it only /health and the
    #: stall rule on /metrics judge liveness, and a frozen engine core with an idle queue goes unseen).
    liveness_generation: bool
    #: Work present and no progress signal (the container's CPU time included) moving this long: frozen.
    freeze_after_s: float
    #: Our canary (sent only when the server looks idle) unanswered this long with the engine showing no
    #: work at all: the engine never saw it (frozen while idle). Also how long /health may fail in a row.
    canary_deadline_s: float
    #: The container counts as stepping when it used at least this many cores since the last round.
    cpu_busy_cores: float
    #: The longest legitimate step: ``step_factor x longest-step tokens / prefill rate`` (at least
    #: ``stall_after_s``); the engine's shape comes from its vLLM arguments (core/vllm/progress.py).
    step_factor: float
    chunked_prefill: bool
    max_num_batched_tokens: int | None
    max_model_len: int | None
    #: Prompt tokens/s assumed until the daemon has learned this config's rate.
    default_prefill_rate: float
    #: KV-pool lottery (docs/kv-pool.md): warn below this many tokens (None: no floor) ...
    kv_warn_below_tokens: int | None
    #: ... or more than this many percent under the baseline of the earlier starts of the same config
    kv_warn_drop_pct: float
    #: Redraw (restart, not a breaker failure) a pool under this many tokens (None: never) ...
    kv_min_tokens: int | None
    #: ... at most this many times in a row, then serve and warn
    kv_max_redraws: int
    #: Last known good (docs/operations.md): failed starts of a changed config before ``on_failed_change``
    rollback_after: int
    #: ... applies: "rollback" (start the last known good) or "hold" (alert only)
    on_failed_change: str
    #: Smoke gates run after the first generation of every start of ours (docs/operations.md "Smoke gates")
    smoke_gates: tuple[GateSpec, ...]
    #: A kernel memory error (NV_ERR_NO_MEMORY, nvmap/CMA ENOMEM, an OOM kill of ours) while loading or
    #: serving: "kill" (SIGKILL at once, no grace) or "warn" (config host.kernel_memory_error)
    kernel_memory_error: str
    #: A line naming nobody while the memory profiler probes kills only with MemAvailable below this (GiB;
    #: the memory guard's debounced floor) or in a storm (core/host/kernel_rule.py, docs/wedge.md)
    kernel_near_floor_gib: float
    #: The contiguity sentinel's threshold (free 4 MiB blocks; 0 = off): a start below it says so
    contiguity_min_free_blocks: int
    #: kv_pool.pin: "off", "advise" (the bad-pool alert names a --kv-cache-memory-bytes) or "apply" (and
    #: the next starts use it)
    kv_pin: str

    def urgent_grace_s(self) -> float:
        """SIGTERM -> SIGKILL of a stop with nothing to save (an emergency, a failed start): the emergency
        grace, capped by the planned one."""
        return min(self.emergency_grace_s, self.stop_grace_s)

    def drain_s(self, maintenance: bool) -> float:
        """How long a drain waits for running requests: the maintenance or the restart bound."""
        return self.maintenance_drain_timeout_s if maintenance else self.drain_timeout_s

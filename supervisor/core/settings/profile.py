"""A profile's sections the machine reads: ``probes``, ``startup``, ``stop``, ``markers``, ``kv_pool`` (the
YAML's names; docs/configuration.md). Where a default differs from the bash suite of docs/field-notes.md, its
comment says why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from supervisor.core.vllm.markers import marker_names


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
    stall_after_s: float = 120.0  # floor of a container's FIRST step (it may compile), counters flat
    freeze_after_s: float = 15.0  # work present, counters AND container CPU time flat this long: frozen
    stack_wait_s: float = 3.0  # a stuck engine's stack is read (py-spy) this long at most before its stop
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

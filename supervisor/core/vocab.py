"""The core's vocabulary: operator intents, what a stop leads to, start outcomes and their ranking.

One definition for the machine, the log analyzer, the diagnosis and the status document.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

#: The profile of the daemon's own alerts and history events (``supervisorctl events supervisor``).
DAEMON_PROFILE: Final = "supervisor"
#: StopContainer reason for a stray container (the effect never answers it with ContainerStopped).
UNWANTED: Final = "unwanted"


class Intent(StrEnum):
    """The operator's intent for a profile (persisted in its own file as the value)."""

    RUN = "run"
    STOP = "stop"


class Pending(StrEnum):
    """What happens once a stop completes (``ProfileState.pending``; persisted as the value)."""

    STOP = "stop"  # an operator stop: STOPPED
    FAILED_START = "failed_start"  # a start failed: breaker record, BACKOFF/FATAL
    EMERGENCY = "emergency"  # a serving failure: breaker record, BACKOFF/FATAL
    RESTART = "restart"  # operator restart: start again, no breaker record
    MAINTENANCE = "maintenance"  # scheduled or --now maintenance: start again, smoke test
    REDRAW = "redraw"  # KV pool under kv_pool.min_tokens: start again to draw another pool

    @classmethod
    def parse(cls, value: object) -> Pending | None:
        """The member written as ``value``; None for null or a value this version does not know."""
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None


#: Stops that lead to a fresh start without a breaker record.
RESTART_PENDINGS: Final = frozenset({Pending.RESTART, Pending.MAINTENANCE, Pending.REDRAW})


class Outcome(StrEnum):
    """How a start attempt ended, as the ledger's ``outcome`` (the value is what is written): the successes,
    then every failure, each with its :attr:`rank` (how specific a cause the log analyzer found) and its
    :attr:`cause` (the ledger's short name of a log failure)."""

    READY = "ready"
    STOPPED = "stopped"  # an operator stop interrupted the start
    REDRAWN = "redrawn"  # a healthy start stopped to draw another KV pool (kv_pool.min_tokens)
    #: Rows that end a run that had served (not a start attempt): its kernel cause and diagnosis are
    #: recorded like a failed start's, so `supervisorctl history` shows why a serving server went away.
    DIED = "died"  # the container exited on its own while serving
    EMERGENCY = "emergency"  # the daemon stopped it (probes, engine death, memory guard)
    WEDGED = "wedged"  # the host went down (hard reboot) while it loaded or served

    # ---- failed starts the vLLM log names (ranked: the most specific cause wins, see RANK below)
    FAILED_CONFIG = "failed_config"  # vLLM refused its arguments or found no model: fails the same way again
    FAILED_OOM = "failed_oom"
    FAILED_GPU_MEM_UTIL = "failed_gpu_mem_util"
    FAILED_KV_INSUFFICIENT = "failed_kv_insufficient"
    FAILED_NO_KV_MEMORY = "failed_no_kv_memory"
    FAILED_SHM = "failed_shm"
    FAILED_ENGINE_INIT = "failed_engine_init"

    # ---- failed starts the machine names
    FAILED = "failed"  # a start that failed without a more precise outcome
    FAILED_CREATE = "failed_create"
    FAILED_EXIT = "failed_exit"
    FAILED_OOM_KILLED = "failed_oom_killed"
    ENGINE_DEAD = "engine_dead"
    FAILED_FORBIDDEN_MARKER = "failed_forbidden_marker"
    FAILED_MARKER_MISSING = "failed_marker_missing"
    FAILED_MEMORY_GUARD = "failed_memory_guard"
    FAILED_KERNEL_MEMORY = "failed_kernel_memory"
    FAILED_FIRST_GENERATION = "failed_first_generation"
    FAILED_UNAUTHORIZED = "failed_unauthorized"  # the first generation got HTTP 401: a key we do not have
    TIMEOUT = "timeout"
    TIMEOUT_SILENCE = "timeout_silence"
    #: After an image change a file overlay's target is not in the new image (docs/operations.md "Patch
    #: custody").
    FAILED_OVERLAY_MISSING = "failed_overlay_missing"

    # ---- failed starts a ``fail`` smoke gate names: ``failed_smoke_<kind>`` (core/vllm/smoke.py's kinds)
    FAILED_SMOKE_STREAM_USAGE = "failed_smoke_stream_usage"
    FAILED_SMOKE_TOOL_CALL = "failed_smoke_tool_call"
    FAILED_SMOKE_DEGENERATION = "failed_smoke_degeneration"
    FAILED_SMOKE_CONTAINS = "failed_smoke_contains"
    FAILED_SMOKE_THINK_LEAK = "failed_smoke_think_leak"
    FAILED_SMOKE_DECODE_FLOOR = "failed_smoke_decode_floor"

    @property
    def failed(self) -> bool:
        """A failed start (worth a diagnosis: the daemon answers its row with one)."""
        return self not in _NOT_FAILED

    @property
    def rank(self) -> int:
        """How specific a failure the log names (0: not one the log analyzer ranks)."""
        return _RANK.get(self, 0)

    @property
    def cause(self) -> str | None:
        """The ledger's short ``cause`` of a log failure (``failed_oom`` -> ``oom``); None for the others."""
        return self.value.removeprefix("failed_") if self.rank else None

    @classmethod
    def parse(cls, value: object) -> Outcome | None:
        """The member written as ``value``; None for null or a value this version does not know."""
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None


_NOT_FAILED: Final = frozenset({Outcome.READY, Outcome.STOPPED, Outcome.REDRAWN})
#: One failed start prints many lines: the most specific cause wins, whatever the order they came in
#: (refused configuration > CUDA OOM > free memory at start > KV insufficient > no KV memory > /dev/shm
#: too small > generic engine init failure).
_RANK: Final = {
    Outcome.FAILED_CONFIG: 7,
    Outcome.FAILED_OOM: 6,
    Outcome.FAILED_GPU_MEM_UTIL: 5,
    Outcome.FAILED_KV_INSUFFICIENT: 4,
    Outcome.FAILED_NO_KV_MEMORY: 3,
    Outcome.FAILED_SHM: 2,
    Outcome.FAILED_ENGINE_INIT: 1,
}
#: The failures the vLLM log names, most specific first.
LOG_FAILURES: Final = tuple(sorted(_RANK, key=lambda o: -_RANK[o]))
#: Deterministic failures: retrying cannot help, so the breaker opens at once (no retries burnt).
CONFIG_OUTCOMES: Final = frozenset({Outcome.FAILED_CONFIG, Outcome.FAILED_UNAUTHORIZED})
#: The probes' error text of a refused request, and what it means (never "shut down on request").
UNAUTHORIZED_ERROR: Final = "HTTP 401"
UNAUTHORIZED_REASON: Final = "the server wants a key the supervisor does not have"


def is_failed(outcome: str) -> bool:
    """A ledger outcome that is a failed start (an unknown value counts as failed, as before)."""
    known = Outcome.parse(outcome)
    return known is None or known.failed


def failure_rank(outcome: str | None) -> int:
    """How specific a failure outcome is (0 for anything the log analyzer does not rank)."""
    known = Outcome.parse(outcome)
    return known.rank if known is not None else 0

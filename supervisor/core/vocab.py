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
    """The ledger's ``outcome`` of a start that did not fail (failures are the log analyzer's
    ``failed_*`` outcomes, ranked by :data:`FAILURE_RANK`)."""

    READY = "ready"
    STOPPED = "stopped"  # an operator stop interrupted the start
    #: Rows that end a run that had served (not a start attempt): its kernel cause and diagnosis are
    #: recorded like a failed start's, so `supervisorctl history` shows why a serving server went away.
    DIED = "died"  # the container exited on its own while serving
    EMERGENCY = "emergency"  # the daemon stopped it (probes, engine death, memory guard)
    REDRAWN = "redrawn"  # a healthy start stopped to draw another KV pool (kv_pool.min_tokens)
    WEDGED = "wedged"  # the host went down (hard reboot) while it loaded or served


#: vLLM refused its arguments or found no model (the log says so): the same start fails the same way.
OUTCOME_CONFIG: Final = "failed_config"
#: The first generation got HTTP 401: the server wants a key the supervisor does not have.
OUTCOME_UNAUTHORIZED: Final = "failed_unauthorized"
#: The probes' error text of a refused request, and what it means (never "shut down on request").
UNAUTHORIZED_ERROR: Final = "HTTP 401"
UNAUTHORIZED_REASON: Final = "the server wants a key the supervisor does not have"
#: After an image change a file overlay's target is not in the new image (docs/operations.md "Patch custody").
OUTCOME_OVERLAY_MISSING: Final = "failed_overlay_missing"
#: Deterministic failures: retrying cannot help, so the breaker opens at once (no retries burnt).
CONFIG_OUTCOMES: Final = frozenset({OUTCOME_CONFIG, OUTCOME_UNAUTHORIZED})
#: Every failed-start outcome the machine records besides the log's (FAILURE_RANK) and the smoke gates'
#: (``failed_smoke_<kind>``): the metrics' restart causes start at 0 for each (tests/test_metrics_zero.py
#: checks the machine uses no other).
MACHINE_FAILURE_OUTCOMES: Final = (
    "failed",
    "failed_create",
    "failed_exit",
    "failed_oom_killed",
    "engine_dead",
    "failed_forbidden_marker",
    "failed_marker_missing",
    "failed_memory_guard",
    "failed_kernel_memory",
    "failed_first_generation",
    OUTCOME_UNAUTHORIZED,
    "timeout",
    "timeout_silence",
    OUTCOME_OVERLAY_MISSING,
)
#: Ledger outcomes that are not a failed start (no diagnosis, no breaker record).
NOT_FAILED_OUTCOMES: Final = frozenset({Outcome.READY, Outcome.STOPPED, Outcome.REDRAWN})


def is_failed(outcome: str) -> bool:
    """A ledger outcome that is a failed start (worth a diagnosis: the daemon answers its row with one)."""
    return outcome not in NOT_FAILED_OUTCOMES


#: One failed start prints many lines: the most specific cause wins, whatever the order they came in
#: (refused configuration > CUDA OOM > free memory at start > KV insufficient > no KV memory > /dev/shm
#: too small > generic engine init failure).
FAILURE_RANK: Final = {
    "failed_config": 7,
    "failed_oom": 6,
    "failed_gpu_mem_util": 5,
    "failed_kv_insufficient": 4,
    "failed_no_kv_memory": 3,
    "failed_shm": 2,
    "failed_engine_init": 1,
}
#: The short cause name of each log failure outcome (ledger ``cause``).
CAUSE_OF: Final = {
    "failed_oom": "oom",
    "failed_gpu_mem_util": "gpu_mem_util",
    "failed_kv_insufficient": "kv_insufficient",
    "failed_no_kv_memory": "no_kv_memory",
    "failed_shm": "shm",
    "failed_config": "config",
    "failed_engine_init": "engine_init",
}


def failure_rank(outcome: str | None) -> int:
    """How specific a failure outcome is (0 for anything the log analyzer does not rank)."""
    return FAILURE_RANK.get(outcome or "", 0)

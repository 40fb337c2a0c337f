"""The core's vocabulary: operator intents, what a stop leads to, start outcomes and their ranking.

One definition for the machine, the log analyzer, the diagnosis and the status document.
"""

from __future__ import annotations

from typing import Final

#: The profile of the daemon's own alerts and history events (``supervisorctl events supervisor``).
DAEMON_PROFILE: Final = "supervisor"

# --- operator intent (persisted in its own file) ---------------------------------------------------
INTENT_RUN: Final = "run"
INTENT_STOP: Final = "stop"

# --- what happens once a stop completes (``ProfileState.pending``) ---------------------------------
PENDING_STOP: Final = "stop"  # an operator stop: STOPPED
PENDING_FAILED_START: Final = "failed_start"  # a start failed: breaker record, BACKOFF/FATAL
PENDING_EMERGENCY: Final = "emergency"  # a serving failure: breaker record, BACKOFF/FATAL
PENDING_RESTART: Final = "restart"  # operator restart: start again, no breaker record
PENDING_MAINTENANCE: Final = "maintenance"  # scheduled or --now maintenance: start again, smoke test
PENDING_REDRAW: Final = "redraw"  # KV pool under kv_pool.min_tokens: start again to draw another pool
#: Stops that lead to a fresh start without a breaker record.
RESTART_PENDINGS: Final = frozenset({PENDING_RESTART, PENDING_MAINTENANCE, PENDING_REDRAW})

# --- start outcomes (the ledger's ``outcome``; the log analyzer's failure outcomes) ----------------
OUTCOME_READY: Final = "ready"
OUTCOME_STOPPED: Final = "stopped"  # an operator stop interrupted the start
#: Ledger rows that end a run that had served (not a start attempt): its kernel cause and diagnosis are
#: recorded like a failed start's, so `supervisorctl history` shows why a serving server went away.
OUTCOME_DIED: Final = "died"  # the container exited on its own while serving
OUTCOME_EMERGENCY: Final = "emergency"  # the daemon stopped it (probes, engine death, memory guard)
OUTCOME_REDRAWN: Final = "redrawn"  # a healthy start stopped to draw another KV pool (kv_pool.min_tokens)
OUTCOME_WEDGED: Final = "wedged"  # the host went down (hard reboot) while it loaded or served
#: vLLM refused its arguments or found no model (the log says so): the same start fails the same way.
OUTCOME_CONFIG: Final = "failed_config"
#: The first generation got HTTP 401: the server wants a key the supervisor does not have.
OUTCOME_UNAUTHORIZED: Final = "failed_unauthorized"
#: The probes' error text of a refused request, and what it means (never "shut down on request").
UNAUTHORIZED_ERROR: Final = "HTTP 401"
UNAUTHORIZED_REASON: Final = "the server wants a key the supervisor does not have"
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
)
#: Ledger outcomes that are not a failed start (no diagnosis, no breaker record).
NOT_FAILED_OUTCOMES: Final = frozenset({OUTCOME_READY, OUTCOME_STOPPED, OUTCOME_REDRAWN})

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

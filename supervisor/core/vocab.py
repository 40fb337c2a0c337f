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
#: Ledger outcomes that are not a failed start (no diagnosis, no breaker record).
NOT_FAILED_OUTCOMES: Final = frozenset({OUTCOME_READY, OUTCOME_STOPPED, OUTCOME_REDRAWN})

#: One failed start prints many lines: the most specific cause wins, whatever the order they came in
#: (CUDA OOM > free memory at start > KV insufficient > no KV memory > generic engine init failure).
FAILURE_RANK: Final = {
    "failed_oom": 5,
    "failed_gpu_mem_util": 4,
    "failed_kv_insufficient": 3,
    "failed_no_kv_memory": 2,
    "failed_engine_init": 1,
}
#: The short cause name of each log failure outcome (ledger ``cause``).
CAUSE_OF: Final = {
    "failed_oom": "oom",
    "failed_gpu_mem_util": "gpu_mem_util",
    "failed_kv_insufficient": "kv_insufficient",
    "failed_no_kv_memory": "no_kv_memory",
    "failed_engine_init": "engine_init",
}


def failure_rank(outcome: str | None) -> int:
    """How specific a failure outcome is (0 for anything the log analyzer does not rank)."""
    return FAILURE_RANK.get(outcome or "", 0)

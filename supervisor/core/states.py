"""Process states (docs/contract.md; supervisord's vocabulary where it fits) and their groups."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    """The state of one supervised profile."""

    STOPPED = "STOPPED"
    PREFLIGHT = "PREFLIGHT"
    WAITING = "WAITING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    DEGRADED = "DEGRADED"
    DRAINING = "DRAINING"
    STOPPING = "STOPPING"
    BACKOFF = "BACKOFF"
    FATAL = "FATAL"
    MAINTENANCE = "MAINTENANCE"


#: Serving traffic and probed (a probe may be failing in DEGRADED).
SERVING_STATES = frozenset({State.RUNNING, State.DEGRADED})
#: Waiting for running requests to finish before a restart.
DRAIN_STATES = frozenset({State.DRAINING, State.MAINTENANCE})
#: The container is expected to be alive and is not being stopped.
CONTAINER_UP_STATES = frozenset({State.STARTING}) | SERVING_STATES | DRAIN_STATES
#: A container of ours exists: up, or being stopped.
CONTAINER_STATES = CONTAINER_UP_STATES | {State.STOPPING}
#: A start in progress, before the server answers (preflight, the load slot, the model load).
LAUNCH_STATES = frozenset({State.PREFLIGHT, State.WAITING, State.STARTING})
#: A start attempt failed: retried later (BACKOFF) or the breaker is open (FATAL).
FAILED_STATES = frozenset({State.BACKOFF, State.FATAL})
#: On the way from one state to another after an operator command (``supervisorctl --wait``).
TRANSIT_STATES = LAUNCH_STATES | DRAIN_STATES | {State.STOPPING}

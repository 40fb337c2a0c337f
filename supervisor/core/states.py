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

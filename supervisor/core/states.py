"""Process states (DESIGN.md contract; supervisord's vocabulary where it fits) and their groups."""

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


#: Serving traffic (a probe may still be failing in DEGRADED).
SERVING_STATES = frozenset({State.RUNNING, State.DEGRADED, State.DRAINING})
#: On the way up: a start attempt is in progress.
STARTING_STATES = frozenset({State.PREFLIGHT, State.WAITING, State.STARTING})
#: Not running and not trying to.
STOPPED_STATES = frozenset({State.STOPPED, State.FATAL})
#: States in which the container is expected to be alive.
CONTAINER_UP_STATES = frozenset(
    {State.STARTING, State.RUNNING, State.DEGRADED, State.DRAINING, State.STOPPING, State.MAINTENANCE}
)

#: ``supervisorctl status`` exit codes.
EXIT_ALL_RUNNING = 0
EXIT_NOT_ALL_RUNNING = 3
EXIT_DAEMON_UNREACHABLE = 4

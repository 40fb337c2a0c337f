"""The no-grace kill of a container (KillContainer): SIGKILL, then wait for it to be down.

Runs on a thread of its own per profile (never queued behind the pool's jobs, nor behind a graceful stop
in flight: a host that ran out of memory has seconds left). Answers like a stop: ContainerStopped once
the container is known to be down, ContainerExited when it was gone already, nothing when Docker did not
answer (the machine re-issues an overdue stop).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.config import Profile
from supervisor.core.errors import ContainerMissing, DockerError, SupervisorError
from supervisor.core.events import ContainerExited, ContainerStopped, Event

log = structlog.get_logger("supervisor.kill")

#: How long to wait for the killed container to be reported down.
WAIT_S = 20.0
#: The in-flight key of a kill (one per profile at a time; not the pool's "kill" kind of an overdue stop).
KIND = "sigkill-now"


def start(
    lock: threading.Lock,
    in_flight: set[str],
    post: Callable[[Event], None],
    docker: DockerAdapter,
    profile: Profile,
    reason: str,
    container_id: str | None,
) -> None:
    """Run :func:`kill` on a thread of its own (unless one runs for this profile) and post its answers."""
    with lock:
        if KIND in in_flight:
            return
        in_flight.add(KIND)
    ref = container_id or profile.container.name

    def body() -> None:
        try:
            for event in kill(docker, ref, reason, container_id):
                post(event)
        finally:
            with lock:
                in_flight.discard(KIND)

    threading.Thread(target=body, name=f"kill-{profile.name}", daemon=True).start()


def kill(docker: DockerAdapter, ref: str, reason: str, container_id: str | None) -> list[Event]:
    """SIGKILL ``ref`` and wait until it is down."""
    try:
        docker.kill(ref, "SIGKILL")
        log.warning("container.killed", container=ref, reason=reason[:200])
    except ContainerMissing:
        return [ContainerExited(None, None, False, container_id)]
    except DockerError as exc:
        if "is not running" not in str(exc):
            log.error("container.kill_failed", container=ref, error=str(exc))
            return []
    except SupervisorError as exc:
        log.error("container.kill_failed", container=ref, error=str(exc))
        return []
    try:
        docker.wait(ref, WAIT_S)
    except ContainerMissing:
        return [ContainerExited(None, None, False, container_id)]
    except SupervisorError as exc:
        log.error("container.kill_wait_failed", container=ref, error=str(exc))
        return []
    return [ContainerStopped()]

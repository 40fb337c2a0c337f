"""A container stopped with a SIGTERM the daemon did not send: an operator's `docker stop`, or dockerd
stopping every container on its way down (an engine restart or upgrade). exits.on_exited holds it as a manual
stop and asks Docker; this module decides once the answer is in."""

from __future__ import annotations

from supervisor.core.actions import WaitDocker
from supervisor.core.events import ContainerStartFailed, DockerAnswered, ExternalStopChecked
from supervisor.core.machine.builder import Step
from supervisor.core.machine.start import postpone
from supervisor.core.profile_state import Load
from supervisor.core.states import State
from supervisor.core.vocab import Intent


def on_external_stop_checked(c: Step, ev: ExternalStopChecked) -> None:
    """STOPPED after an outside SIGTERM: Docker kept answering (an operator's stop: honoured) or went away
    (dockerd shutting down: not anybody's wish, not a failure: start again, no breaker record)."""
    if c.s.state != State.STOPPED or not c.s.external_stop_unconfirmed:
        return  # an operator command came first
    c.set(external_stop_unconfirmed=False)
    if not ev.engine_restarting:
        c.emit("container.stopped_externally")
        c.alert_kind(
            "warning",
            "container.stopped_externally",
            State.STOPPED,
            State.STOPPED,
            "external docker stop; `supervisorctl start` resumes",
        )
        return
    # STOPPED -> PREFLIGHT: the creation is postponed (no breaker record) until Docker answers again
    c.emit("container.stopped_by_docker_restart")
    c.set(intent=Intent.RUN)
    c.preflight("Docker engine restarted")
    c.alert_kind(
        "warning",
        "docker.restarted",
        State.STOPPED,
        State.PREFLIGHT,
        "dockerd stopped the container while shutting down",
    )


def on_start_deferred(c: Step, ev: ContainerStartFailed) -> None:
    """STARTING -> BACKOFF: the create/start got no answer from Docker; nothing is known about the server,
    no breaker record. Docker is watched closely meanwhile (WaitDocker): on_docker_answered."""
    c.emit("start.deferred", error=ev.error)
    c.release_slot()
    c.set(load=Load(), container_id=None)
    postpone(c, "Docker unreachable", ev.error)
    retry_at = c.s.backoff.retry_at
    c.do(WaitDocker(limit_s=max(0.0, (retry_at if retry_at is not None else c.now) - c.now)))


def on_docker_answered(c: Step, ev: DockerAnswered) -> None:
    """BACKOFF after a create Docker did not answer: Docker is back (it was seen down, then answering):
    start again now rather than at the next backoff step (after a dockerd restart, Docker's own restart
    policies get their containers going as the engine comes up; waiting here would lose seconds)."""
    if not (ev.ok and ev.was_down) or c.s.intent != Intent.RUN:
        return  # still down (the backoff retries), or it never looked down: the backoff decides
    # BACKOFF -> PREFLIGHT
    c.emit("docker.answering_again", attempt=c.s.backoff.attempt)
    c.preflight("Docker answers again")

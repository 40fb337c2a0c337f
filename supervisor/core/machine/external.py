"""A container stopped with a SIGTERM the daemon did not send: an operator's `docker stop`, or dockerd
stopping every container on its way down (an engine restart or upgrade) or as it comes back up after a crash.
exits.on_exited holds it as a manual stop and asks Docker; this module decides once the answer is in.

Between the outside SIGTERM and the exit, and while Docker does not answer, the API server is going or
gone: a probe failure then is that stop in progress, not a broken engine, and the emergency it would reach
waits (:func:`emergency_held`) for the exit to say what happened (docs/state-machine.md "Exits nobody asked
for")."""

from __future__ import annotations

from supervisor.core.actions import WaitDocker
from supervisor.core.events import (
    ContainerSignalled,
    ContainerStartFailed,
    DockerAnswered,
    DockerLink,
    ExternalStopChecked,
)
from supervisor.core.machine.builder import Step
from supervisor.core.machine.exits import STOP_SIGNALS
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
    if not (ev.engine_restarting or engine_went_away(c)):
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


#: An outside SIGTERM seen this long after Docker answered again is the engine's own: dockerd coming back
#: up after a crash stops the containers it finds still running before or just after it answers.
ENGINE_BACK_WINDOW_S = 60.0


def on_signalled(c: Step, ev: ContainerSignalled) -> None:
    """A stop signal the daemon did not send (it sends its own only in STOPPING): the exit follows; until
    then, or the stop's longest grace, a probe failure is that stop (:func:`emergency_held`)."""
    if ev.signal not in STOP_SIGNALS or c.s.state == State.STOPPING:
        return
    c.emit("container.signalled", signal=ev.signal, container_id=ev.container_id)
    c.set(outside_signal_at=c.now)


def on_docker_link(c: Step, ev: DockerLink) -> None:
    """The container's watch lost Docker (it stopped answering) or has it again."""
    if not ev.up:
        if c.s.docker_lost_at is None:
            c.emit("docker.lost", container_id=ev.container_id)
            c.set(docker_lost_at=c.now)
        return
    lost_at = c.s.docker_lost_at
    c.emit("docker.back", container_id=ev.container_id, down_s=None if lost_at is None else c.now - lost_at)
    c.set(docker_lost_at=None, docker_back_at=c.now)


def engine_went_away(c: Step) -> bool:
    """Docker was not answering the container's watch, or answered again within the last
    :data:`ENGINE_BACK_WINDOW_S`: an outside SIGTERM now is the engine's (a restart or its recovery after
    a crash), not an operator's. A human's ``docker stop`` that soon after a dockerd restart is taken for
    the engine's: the model serves again (``supervisorctl stop`` is the way to stop it for good)."""
    back = c.s.docker_back_at
    return c.s.docker_lost_at is not None or (back is not None and 0 <= c.now - back <= ENGINE_BACK_WINDOW_S)


def emergency_held(c: Step) -> str | None:
    """Why an emergency a probe failure reached waits, or None: Docker is not answering (dockerd going
    down stops the container; nothing can be stopped without Docker anyway), or an outside SIGTERM was seen
    and the container's exit has not come yet, for at most the stop's grace and overdue time."""
    if c.s.docker_lost_at is not None:
        return "Docker is not answering: its exit or the engine's answer decides"
    at = c.s.outside_signal_at
    if at is not None and 0 <= c.now - at <= c.policy.stop.grace_s + c.policy.stop_overdue_s:
        return "a SIGTERM from outside the supervisor: the container's exit decides"
    return None

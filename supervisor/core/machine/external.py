"""A container stopped with a SIGTERM the daemon did not send: an operator's `docker stop`, or dockerd
stopping every container on its way down (an engine restart or upgrade). ops.on_exited holds it as a manual
stop and asks Docker; this module decides once the answer is in."""

from __future__ import annotations

from supervisor.core.events import ExternalStopChecked
from supervisor.core.machine.builder import Step
from supervisor.core.states import State
from supervisor.core.vocab import INTENT_RUN


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
    c.set(intent=INTENT_RUN)
    c.preflight("Docker engine restarted")
    c.alert_kind(
        "warning",
        "docker.restarted",
        State.STOPPED,
        State.PREFLIGHT,
        "dockerd stopped the container while shutting down",
    )

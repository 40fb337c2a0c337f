"""Stops from outside while serving (plain ``now``, no I/O): a SIGTERM the daemon did not send, and Docker
going away under the container (dockerd shutting down, or crashing and stopping its leftovers as it comes
back). A probe failure meanwhile is that stop in progress, not a broken engine: no emergency, no breaker
record, and the model serves again when Docker was the one that stopped it."""

from __future__ import annotations

from supervisor.core.actions import Action, CheckExternalStop, StopContainer
from supervisor.core.events import (
    ContainerExited,
    ContainerSignalled,
    DaemonStarted,
    DockerLink,
    ExternalStopChecked,
    ProbeRound,
)
from supervisor.core.machine.external import ENGINE_BACK_WINDOW_S
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

#: The shipped cadence (probe rounds every 5 s, 3 failures) and grace (120 s planned, 10 s overdue).
POLICY = policy(
    probes={"interval_s": 5.0, "failure_threshold": 3}, stop={"grace_s": 120.0, "emergency_grace_s": 10.0}
)
DEAD_API = ProbeRound(
    health_ok=False,
    health_status=None,
    gen_ok=None,
    gen_latency_ms=None,
    gen_error=None,
    requests_running=None,
    requests_waiting=None,
    generation_tokens_total=None,
)
TERM = ContainerExited(exit_code=0, signal="15", oom_killed=False, container_id="c1")


def _serving() -> Driver:
    d = Driver(policy=POLICY)
    fresh_boot(d)
    d.to_running()
    assert d.st() == State.RUNNING
    return d


def _fail_rounds(d: Driver, n: int) -> list[Action]:
    acts: list[Action] = []
    for _ in range(n):
        d.advance(POLICY.probes.interval_s)
        acts += d.send(DEAD_API)
    return acts


def _stops(acts: list[Action]) -> list[StopContainer]:
    return [a for a in acts if isinstance(a, StopContainer)]


def test_failures_between_an_outside_sigterm_and_the_exit_are_not_an_emergency() -> None:
    """dockerd (or an operator) sent SIGTERM; the API closed before the exit came: the failures that would
    reach the threshold wait for the exit, which decides (here: dockerd going down, the model starts
    again)."""
    d = _serving()
    d.send(ContainerSignalled("15", "c1"))
    acts = _fail_rounds(d, POLICY.probes.failure_threshold + 2)
    assert _stops(acts) == []
    assert d.s.emergencies == 0
    assert d.st() == State.DEGRADED
    assert "probe.emergency_held" in d.emits()
    acts = d.send(TERM)
    assert any(isinstance(a, CheckExternalStop) for a in acts)
    d.send(ExternalStopChecked(engine_restarting=True))
    assert d.st() == State.PREFLIGHT
    assert d.s.emergencies == 0
    assert d.s.breaker.failures == ()


def test_without_an_outside_signal_the_same_failures_are_an_emergency() -> None:
    """The control: the same rounds with no SIGTERM seen stop the container at the threshold."""
    d = _serving()
    acts = _fail_rounds(d, POLICY.probes.failure_threshold)
    assert [s.reason for s in _stops(acts)] == ["emergency"]
    assert d.s.emergencies == 1


def test_a_sigterm_whose_exit_never_comes_holds_only_for_the_stop_grace() -> None:
    """A SIGTERM the container ignored and nobody followed with a SIGKILL: after the stop's grace and its
    overdue time the failures are judged again (the engine is not left unwatched)."""
    d = _serving()
    d.send(ContainerSignalled("SIGTERM", "c1"))
    assert _stops(_fail_rounds(d, POLICY.probes.failure_threshold)) == []
    d.advance(POLICY.stop.grace_s + POLICY.stop_overdue_s)
    acts = _fail_rounds(d, 1)
    assert [s.reason for s in _stops(acts)] == ["emergency"]


def test_a_sigkill_or_another_profiles_container_holds_nothing() -> None:
    """Only a stop signal to our own container holds: a SIGKILL is a death, another container is not ours."""
    d = _serving()
    d.send(ContainerSignalled("9", "c1"))
    d.send(ContainerSignalled("15", "other"))
    assert [s.reason for s in _stops(_fail_rounds(d, POLICY.probes.failure_threshold))] == ["emergency"]
    assert "container.signalled" not in d.emits()


def test_our_own_stop_signal_is_not_an_outside_one() -> None:
    """The daemon's own SIGTERM (STOPPING) is not recorded as an outside stop."""
    d = _serving()
    _fail_rounds(d, POLICY.probes.failure_threshold)
    assert d.st() == State.STOPPING
    d.send(ContainerSignalled("15", "c1"))
    assert d.s.outside_signal_at is None


def test_while_docker_is_lost_failures_wait_and_after_it_answers_they_count() -> None:
    """dockerd went away (its events stream could not be opened again): nothing could be stopped anyway,
    and the container is likely being stopped by it; once Docker answers and the container still fails,
    the next failing round is the emergency."""
    d = _serving()
    d.send(DockerLink(False, "c1"))
    assert _stops(_fail_rounds(d, POLICY.probes.failure_threshold + 3)) == []
    assert d.s.emergencies == 0
    d.send(DockerLink(True, "c1"))
    assert "docker.back" in d.emits()
    assert [s.reason for s in _stops(_fail_rounds(d, 1))] == ["emergency"]


def test_a_sigterm_just_after_docker_came_back_is_the_engines_not_an_operators() -> None:
    """dockerd crashed (SIGKILL: its containers run on) and came back: as it starts it stops the containers
    it finds; the kill and die come when the watch's stream opens again. Docker keeps answering, so the
    engine check says "operator", but Docker was just away: the model serves again, no manual stop."""
    d = _serving()
    d.send(DockerLink(False, "c1"))
    d.advance(4)
    d.send(DockerLink(True, "c1"))
    d.send(ContainerSignalled("15", "c1"))
    d.send(TERM)
    d.advance(6)
    d.send(ExternalStopChecked(engine_restarting=False))
    assert d.st() == State.PREFLIGHT
    assert d.s.intent == "run"
    assert "container.stopped_by_docker_restart" in d.emits()
    assert "container.stopped_externally" not in d.emits()


def test_an_operators_docker_stop_long_after_docker_came_back_is_a_manual_stop() -> None:
    """The window after Docker answered again is bounded: a `docker stop` later is an operator's."""
    d = _serving()
    d.send(DockerLink(False, "c1"))
    d.send(DockerLink(True, "c1"))
    d.advance(ENGINE_BACK_WINDOW_S + 5)
    d.send(ContainerSignalled("15", "c1"))
    d.send(TERM)
    d.send(ExternalStopChecked(engine_restarting=False))
    assert d.st() == State.STOPPED
    assert d.s.intent == "stop"
    assert "container.stopped_externally" in d.emits()


def test_a_restarted_daemon_forgets_what_the_last_ones_watch_saw() -> None:
    """Docker lost and an outside signal are the last daemon's watch's news: a new daemon judges afresh."""
    d = _serving()
    d.send(DockerLink(False, "c1"))
    d.send(ContainerSignalled("15", "c1"))
    d.send(DaemonStarted(boot_changed=False))
    assert d.s.docker_lost_at is None
    assert d.s.outside_signal_at is None

"""Stops when the host or the engine is at stake (plain ``now``, no I/O): the emergency grace of a
failed start, liveness that keeps running while a profile drains or stops, and a restart of a sick
engine without a drain."""

from __future__ import annotations

from supervisor.core.actions import Action, Emit, RunProbeRound, StopContainer
from supervisor.core.events import (
    ContainerExited,
    ContainerObserved,
    ContainerStarted,
    DaemonStarted,
    GenerationDone,
    LogEngineDead,
    LogProgress,
    MaintenanceRequested,
    MemoryPressure,
    PreflightDone,
    ProbeRound,
    RestartRequested,
    Settled,
    SlotAcquired,
    StartRequested,
    StopRequested,
)
from supervisor.core.fleet.memory import memory_guard_targets
from supervisor.core.machine import Policy
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

#: The shipped profiles' planned grace (container.stop_timeout 120) and emergency grace (10 s).
POLICY = policy(
    stop={"grace_s": 120.0, "emergency_grace_s": 10.0}, probes={"interval_s": 15.0, "failure_threshold": 4}
)


def _driver(policy: Policy = POLICY) -> Driver:
    d = Driver(policy=policy)
    fresh_boot(d)
    return d


def _stops(actions: list[Action]) -> list[StopContainer]:
    return [a for a in actions if isinstance(a, StopContainer)]


def _rounds(actions: list[Action]) -> list[RunProbeRound]:
    return [a for a in actions if isinstance(a, RunProbeRound)]


def _round(*, health: bool = True, running: float = 0.0, tokens: float = 100.0) -> ProbeRound:
    return ProbeRound(
        health_ok=health,
        health_status=200 if health else None,
        gen_ok=None,
        gen_latency_ms=None,
        gen_error=None,
        requests_running=running,
        requests_waiting=0.0,
        generation_tokens_total=tokens,
        cpu_s=0.0,  # a frozen engine burns no CPU: a flat reading (none at all would leave the slow limit)
    )


# --- the emergency grace while STARTING --------------------------------------------------------


def test_memory_guard_while_starting_stops_with_the_emergency_grace() -> None:
    """MemoryPressure during a load: SIGKILL after stop.emergency_grace_s (10 s), not stop.grace_s (120 s)."""
    d = _driver()
    d.to_starting()
    d.advance(20)
    acts = d.send(MemoryPressure(detail="MemAvailable 1.0 GiB < 6.0 GiB for 5 samples"))
    assert d.st() == State.STOPPING
    assert [(s.reason, s.grace_s) for s in _stops(acts)] == [("memory guard", 10.0)]
    # the overdue kill comes the emergency grace + stop_overdue_s after the stop, not 120 s + that
    assert d.s.stop_deadline == d.now + 10.0 + POLICY.stop_overdue_s
    d.send(ContainerExited(exit_code=137, signal="SIGKILL", oom_killed=False))
    assert d.st() == State.BACKOFF
    assert d.records()[-1].outcome == "failed_memory_guard"


def test_every_failed_start_stop_uses_the_emergency_grace() -> None:
    """Engine death, a hung load (silence) and the start deadline: nothing to drain in a failed start."""
    p = policy(
        stop={"grace_s": 120.0, "emergency_grace_s": 10.0},
        startup={"silence_timeout_s": 100.0, "deadline_s": 300.0},
    )
    d = _driver(p)
    d.to_starting()
    acts = d.send(LogEngineDead(detail="EngineCore died"))
    assert [s.grace_s for s in _stops(acts)] == [10.0]

    d = _driver(p)
    d.to_starting()
    acts = d.advance(100)
    assert [(s.reason, s.grace_s) for s in _stops(acts)] == [("no loading progress", 10.0)]

    d = _driver(p)
    d.to_starting()
    acts = []
    for _ in range(6):  # progress every 50 s keeps the silence rule quiet until the deadline
        d.send(LogProgress(phase="weights", pct=None))
        acts += d.advance(50)
    assert [(s.reason, s.grace_s) for s in _stops(acts)] == [("start deadline reached", 10.0)]


def test_a_failed_start_keeps_a_shorter_planned_grace() -> None:
    """The emergency grace is capped by stop.grace_s (a profile with grace_s 3 keeps 3)."""
    d = _driver(policy(stop={"grace_s": 3.0, "emergency_grace_s": 10.0}))
    d.to_starting()
    acts = d.send(MemoryPressure(detail="low"))
    assert [s.grace_s for s in _stops(acts)] == [3.0]


def test_an_operator_stop_while_starting_keeps_the_planned_grace() -> None:
    """Only what serves nobody is cut short: an operator's stop is planned (stop.grace_s)."""
    d = _driver()
    d.to_starting()
    acts = d.send(StopRequested())
    assert [s.grace_s for s in _stops(acts)] == [120.0]


def test_a_resumed_failed_start_stop_keeps_the_emergency_grace() -> None:
    """The daemon died mid-stop of a failed start: the new daemon re-issues it with the emergency grace."""
    d = _driver()
    d.to_starting()
    d.send(MemoryPressure(detail="low"))
    assert d.st() == State.STOPPING
    d.send(DaemonStarted(boot_changed=False))
    acts = d.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    assert [(s.reason, s.grace_s) for s in _stops(acts)] == [("failed_start", 10.0)]


# --- probes never stop: DRAINING and MAINTENANCE -------------------------------------------------


def _draining(maintenance: bool = False) -> Driver:
    d = _driver(
        policy(
            stop={"grace_s": 120.0, "drain_timeout_s": 600.0},
            probes={"interval_s": 15.0, "failure_threshold": 4},
        )
    )
    d.to_running()
    d.send(MaintenanceRequested() if maintenance else RestartRequested())
    assert d.st() == (State.MAINTENANCE if maintenance else State.DRAINING)
    return d


def test_liveness_rounds_go_on_while_draining() -> None:
    """DRAINING: a probe round with the liveness generation every probe interval, besides the drain polls."""
    d = _draining()
    rounds: list[RunProbeRound] = []
    for _ in range(45):
        step = _rounds(d.advance(1))
        rounds += step
        if step:
            d.send(GenerationDone(ok=True, latency_ms=50.0, error=None))
    assert rounds == [RunProbeRound(generation=True, measure=False)] * 3


def test_a_freeze_during_a_drain_ends_it_with_an_emergency() -> None:
    """Requests run, tokens stay flat and our generation is never answered: the emergency comes at the
    serving bound (interval x (threshold - 1) = 45 s after the first unanswered send), not at
    drain_timeout_s."""
    for maintenance in (False, True):
        d = _draining(maintenance)
        drain_began = d.now
        acts: list[Action] = []
        while d.st() != State.STOPPING and d.now - drain_began < 600:
            step = d.advance(1)
            acts += step
            if _rounds(step):
                acts += d.send(_round(running=2.0, tokens=500.0))
        took = d.now - drain_began
        assert d.st() == State.STOPPING, maintenance
        assert took <= 15 + 45 + 1, took
        assert [(s.reason, s.grace_s) for s in _stops(acts)] == [("emergency", 10.0)]
        names = [a.name for a in acts if isinstance(a, Emit)]
        assert "emergency.stop" in names
        assert "drain.timeout" not in names
        d.send(ContainerExited(exit_code=137, signal="SIGKILL", oom_killed=False))
        assert d.st() == State.BACKOFF  # an emergency: the breaker counts it
        assert len(d.s.breaker.failures) == 1


def test_a_healthy_drain_is_not_disturbed_by_its_probe_rounds() -> None:
    """Tokens move and the generation answers: the drain ends when no request runs, as before."""
    d = _draining()
    tokens = 500.0
    for _ in range(60):
        step = d.advance(1)
        if _rounds(step):
            tokens += 40
            d.send(_round(running=1.0, tokens=tokens))
            d.send(GenerationDone(ok=True, latency_ms=80.0, error=None))
    assert d.st() == State.DRAINING
    assert d.s.consecutive_failures == 0


# --- probes never stop: STOPPING ---------------------------------------------------------------


def test_liveness_rounds_without_generation_while_stopping() -> None:
    """STOPPING: rounds read /health and /metrics only (vLLM refuses new work once it has the SIGTERM)."""
    d = _driver()
    d.to_running()
    d.send(StopRequested())
    acts = d.advance(31)  # the first one interval after the stop began
    assert _rounds(acts) == [RunProbeRound(generation=False, measure=False)] * 2


def test_a_frozen_shutdown_is_killed_at_once() -> None:
    """After a planned SIGTERM (120 s grace) requests still run and no token moves for interval x
    (threshold - 1): the stop becomes a SIGKILL then, not at 120 s."""
    d = _driver()
    d.to_running()
    stop_at = d.now
    d.send(StopRequested())
    acts: list[Action] = []
    while d.now - stop_at < 120:
        step = d.advance(1)
        acts += step
        if _rounds(step):
            acts += d.send(_round(health=True, running=3.0, tokens=900.0))
    kills = [(s.reason, s.grace_s) for s in _stops(acts)]
    assert kills[0] == ("stop_escalated", 0.0)
    escalated = next(a for a in acts if isinstance(a, Emit) and a.name == "stop.escalated")
    assert escalated.fields["reason"] == "stop"
    assert d.st() == State.STOPPING
    d.send(ContainerExited(exit_code=137, signal="SIGKILL", oom_killed=False))
    assert d.st() == State.STOPPED  # still the operator's stop: no breaker record
    assert d.s.breaker.failures == ()


def test_a_shutdown_whose_requests_finish_or_go_is_never_escalated() -> None:
    """/health failing (the server shuts down) or tokens moving are a normal stop."""
    d = _driver()
    d.to_running()
    d.send(StopRequested())
    tokens = 100.0
    acts: list[Action] = []
    for i in range(100):
        step = d.advance(1)
        acts += step
        if _rounds(step):
            tokens += 10
            acts += d.send(_round(health=i % 2 == 0, running=1.0, tokens=tokens))
    assert "stop.escalated" not in [a.name for a in acts if isinstance(a, Emit)]


# --- restart of a sick engine: no drain ----------------------------------------------------------


def test_restart_of_a_degraded_engine_skips_the_drain() -> None:
    """DEGRADED -> STOPPING at once (a drain would wait for requests a sick engine may never finish)."""
    d = _driver()
    d.to_running()
    d.advance(15)
    d.send(_round(health=False))
    assert d.st() == State.DEGRADED
    acts = d.send(RestartRequested())
    assert d.st() == State.STOPPING
    assert [s.reason for s in _stops(acts)] == ["restart"]
    assert "drain.skipped" in [a.name for a in acts if isinstance(a, Emit)]
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    assert d.st() == State.PREFLIGHT  # a restart, not a breaker failure
    assert d.s.breaker.failures == ()


def test_restart_of_a_running_engine_whose_generation_hangs_skips_the_drain() -> None:
    """RUNNING, but our generation is unanswered for two intervals and no token moved: frozen-looking, no
    drain. One interval is not enough (a slow answer on a busy box)."""
    d = _driver()
    d.to_running()
    d.advance(15)  # the round (with a generation) is sent; no answer comes, nor the round's
    d.advance(15)
    assert d.st() == State.RUNNING
    before = d.s
    d.send(RestartRequested())
    assert d.st() == State.DRAINING
    d.s = before
    d.advance(15)
    assert d.st() == State.RUNNING
    d.send(RestartRequested())
    assert d.st() == State.STOPPING


def test_restart_of_a_healthy_engine_still_drains() -> None:
    d = _driver()
    d.to_running()
    d.advance(15)
    d.send(_round())
    d.send(GenerationDone(ok=True, latency_ms=50.0, error=None))
    d.send(RestartRequested())
    assert d.st() == State.DRAINING


def test_restart_of_a_saturated_engine_still_drains() -> None:
    """Our generation waits in a full queue, but tokens moved since it was sent: busy, not frozen."""
    d = _driver()
    d.to_running()
    d.advance(15)
    d.send(_round(running=4.0, tokens=100.0))  # the pending period's baseline
    d.advance(15)
    d.send(_round(running=4.0, tokens=400.0))
    d.send(RestartRequested())
    assert d.st() == State.DRAINING


# --- the memory guard while a stop waits out its grace ------------------------------------------


def test_the_memory_guard_makes_a_planned_stop_a_kill() -> None:
    """An operator stop of a load (planned 120 s grace, the SIGTERM lost by vLLM): the guard kills it now."""
    d = _driver()
    d.to_starting()
    d.send(StopRequested())
    d.advance(5)
    acts = d.send(MemoryPressure(detail="MemAvailable 1.0 GiB < 6 GiB"))
    assert [(s.reason, s.grace_s) for s in _stops(acts)] == [("stop_escalated", 0.0)]
    escalated = [a for a in acts if isinstance(a, Emit) and a.name == "stop.escalated"]
    assert escalated[0].fields["why"] == "memory guard: MemAvailable 1.0 GiB < 6 GiB"
    assert _stops(d.send(MemoryPressure(detail="again"))) == []  # once
    d.send(ContainerExited(exit_code=137, signal="SIGKILL", oom_killed=False))
    assert d.st() == State.STOPPED


def test_the_memory_guard_leaves_an_emergency_stop_alone() -> None:
    """A stop that already has the emergency grace is not re-issued."""
    d = _driver()
    d.to_starting()
    d.send(MemoryPressure(detail="low"))
    assert d.st() == State.STOPPING
    d.advance(2)
    assert _stops(d.send(MemoryPressure(detail="low"))) == []


def test_memory_guard_targets_include_stopping_profiles() -> None:
    """The guard stops what loads (else what serves), and tells every profile already stopping."""
    states = {"a": State.STARTING, "b": State.RUNNING, "c": State.STOPPING}
    assert memory_guard_targets(states) == ["a", "c"]
    assert memory_guard_targets({"b": State.RUNNING, "c": State.STOPPING}) == ["b", "c"]


def test_memory_guard_before_the_container_exists_stops_the_late_one_with_the_emergency_grace() -> None:
    """The guard trips while the container is being created (STARTING, no container id yet: a loaded box's
    slow create). The container that comes up after is unwanted, and a load: it is stopped with the
    emergency grace (10 s), not the planned 120 s in which it would go on allocating. Seen once in the
    fault matrix under load (bench.faults memory_guard_load, 2026-12-05)."""
    d = _driver()
    d.send(StartRequested())
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    assert d.st() == State.STARTING
    assert d.s.container_id is None
    d.send(MemoryPressure(detail="MemAvailable 1.0 GiB < 6.0 GiB for 3 samples"))
    assert d.st() == State.STOPPING
    acts = d.send(ContainerStarted("late"))
    assert [(s.container_id, s.grace_s) for s in _stops(acts)] == [("late", 10.0)]

"""Scenario tests of the profile state machine with a plain ``now`` (no I/O, no sleeping)."""

from __future__ import annotations

import json

from supervisor.core.actions import (
    AcquireSlot,
    Action,
    CheckAuth,
    CheckExternalStop,
    CreateAndStart,
    PollDrain,
    ProbeHealth,
    ReleaseSlot,
    RunFirstGeneration,
    RunPreflight,
    RunProbeRound,
    StopContainer,
    WaitDocker,
    WatchContainer,
)
from supervisor.core.events import (
    AuthResult,
    ContainerExited,
    ContainerObserved,
    ContainerStartFailed,
    ContainerStopped,
    DaemonStarted,
    DockerAnswered,
    DrainProgress,
    ExternalStopChecked,
    FirstGeneration,
    LogEngineDead,
    LogKvPool,
    LogProgress,
    LogReady,
    LogStartupFailure,
    MaintenanceRequested,
    PreflightDone,
    ProbeRound,
    ResetRequested,
    RestartRequested,
    Settled,
    SlotAcquired,
    StartRequested,
    StopRequested,
)
from supervisor.core.machine import Policy
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import BAD_HEALTH, OK_HEALTH, Driver, fresh_boot, policy, reply_of

CRASH = ContainerExited(exit_code=1, signal=None, oom_killed=False)


def _round(
    *,
    health: bool = True,
    gen: bool | None = True,
    running: float | None = 0.0,
    waiting: float | None = 0.0,
    tokens: float | None = 100.0,
) -> ProbeRound:
    return ProbeRound(
        health_ok=health,
        health_status=200 if health else None,
        gen_ok=gen,
        gen_latency_ms=50.0 if gen else None,
        gen_error=None if gen is not False else "timeout",
        requests_running=running,
        requests_waiting=waiting,
        generation_tokens_total=tokens,
    )


def _started(pol: Policy | None = None) -> Driver:
    d = Driver(policy=pol or policy(probes={"interval_s": 60.0, "failure_threshold": 5}))  # the bash cadence
    fresh_boot(d)
    return d


def _fail_start(d: Driver) -> None:
    d.to_starting()
    d.send(LogStartupFailure(outcome="failed_oom", detail="CUDA out of memory"))
    d.send(CRASH)


def test_ready_needs_log_and_health() -> None:
    """Health is polled only after the ready line, and the first generation needs both."""
    d = _started()
    d.to_starting()
    acts = d.advance(20)
    assert not any(isinstance(a, ProbeHealth) for a in acts)
    assert d.send(OK_HEALTH) == []  # a stray health answer before ready counts for nothing
    acts = d.send(LogReady())
    assert any(isinstance(a, ProbeHealth) for a in acts)
    assert not any(isinstance(a, RunFirstGeneration) for a in acts)
    d.send(BAD_HEALTH)
    acts = d.advance(2)
    assert any(isinstance(a, ProbeHealth) for a in acts)
    acts = d.send(OK_HEALTH)
    assert any(isinstance(a, RunFirstGeneration) for a in acts)
    assert any(isinstance(a, CheckAuth) for a in acts)  # always, key or not (docs/state-machine.md "Auth")
    assert d.st() == State.STARTING


def test_auth_checked_when_required_and_open_alerts() -> None:
    """With a key configured a no-key request is sent; an open API raises a critical alert."""
    d = _started(policy(api_key_configured=True))
    d.to_starting()
    d.send(LogReady())
    acts = d.send(OK_HEALTH)
    assert any(isinstance(a, CheckAuth) for a in acts)
    acts = d.send(AuthResult("open"))
    assert [a.severity for a in d.alerts(acts)] == ["critical"]
    assert "auth.open" in d.emits(acts)
    assert d.s.status_dict(d.now)["auth"] == "open"


def _first_generation_fails(d: Driver, times: int) -> list[Action]:
    """Answer ``times`` first-generation attempts with a failure (each after a healthy /health)."""
    acts: list[Action] = []
    for _ in range(times):
        sent = d.send(OK_HEALTH)
        assert any(isinstance(a, RunFirstGeneration) for a in sent)
        acts = d.send(FirstGeneration(ok=False, latency_ms=None, error="completion_tokens=0"))
    return acts


def test_first_generation_failure_fails_the_start() -> None:
    """First generations failing failure_threshold times stop the container: a failed start."""
    d = _started()
    d.to_starting()
    d.send(LogReady())
    acts = _first_generation_fails(d, d.policy.probes.failure_threshold - 1)
    assert not any(isinstance(a, StopContainer) for a in acts)  # a slow cold start is retried
    assert d.st() == State.STARTING
    assert "start.first_generation_retry" in d.emits()
    acts = _first_generation_fails(d, 1)
    assert [a.reason for a in acts if isinstance(a, StopContainer)] == ["first generation failed"]
    assert d.st() == State.STOPPING
    d.send(ContainerStopped())
    assert d.st() == State.BACKOFF
    assert d.records()[-1].outcome == "failed_first_generation"
    assert len(d.s.breaker.failures) == 1


def test_progress_extends_silence_deadline() -> None:
    """Each progress line pushes the silence deadline; only 600 s without progress fails."""
    d = _started(
        policy(probes={"interval_s": 60.0, "failure_threshold": 5}, startup={"silence_timeout_s": 600.0})
    )
    d.to_starting()
    d.advance(500)
    d.send(LogProgress(pct=40.0, phase="weights"))
    d.advance(500)
    assert d.st() == State.STARTING
    d.send(LogKvPool(tokens=1_000_000, max_concurrency=4.0))
    d.advance(599)
    assert d.st() == State.STARTING
    assert d.s.status_dict(d.now)["load_progress"]["pct"] == 40.0
    d.advance(1)
    assert d.st() == State.STOPPING


def test_silence_timeout_fails_start() -> None:
    """No progress for silence_timeout_s stops the container and records a timeout."""
    d = _started(
        policy(probes={"interval_s": 60.0, "failure_threshold": 5}, startup={"silence_timeout_s": 600.0})
    )
    d.to_starting()
    acts = d.advance(600)
    stops = [a for a in acts if isinstance(a, StopContainer)]
    assert [s.reason for s in stops] == ["no loading progress"]
    assert d.st() == State.STOPPING
    d.send(ContainerExited(exit_code=143, signal=None, oom_killed=False, container_id="c1"))
    assert d.st() == State.BACKOFF
    assert d.records()[-1].outcome == "timeout_silence"
    assert d.records()[-1].load_s == 600


def test_hard_deadline_even_with_progress() -> None:
    """Progress never extends the load beyond startup_deadline_s."""
    d = _started()
    d.to_starting()
    for i in range(17):
        d.advance(100)
        d.send(LogProgress(pct=float(i), phase="warmup"))
    assert d.st() == State.STARTING
    d.advance(100)
    assert d.st() == State.STOPPING
    d.send(ContainerStopped())
    assert d.records()[-1].outcome == "timeout"
    assert d.records()[-1].load_s == 1800


def test_startup_failure_backoff_doubles_and_caps() -> None:
    """Failed starts back off 30, 60, 120, ... capped at 900 s (initial 30 s here; the default is 1 s),
    then retry through PREFLIGHT."""
    d = _started(policy(breaker={"limit": 100}, backoff={"initial_s": 30.0}))
    delays = []
    for _ in range(7):
        _fail_start(d)
        assert d.st() == State.BACKOFF
        assert d.records()[-1].outcome == "failed_oom"
        retry_at = d.s.backoff.retry_at
        assert retry_at is not None
        delays.append(retry_at - d.now)
        d.advance(retry_at - d.now - 1)
        assert d.st() == State.BACKOFF
        acts = d.advance(1)
        assert d.st() == State.PREFLIGHT
        assert any(isinstance(a, RunPreflight) for a in acts)
    assert delays == [30, 60, 120, 240, 480, 900, 900]


def test_breaker_opens_after_three_failures_in_window() -> None:
    """Three failed starts within 2 h open the breaker: FATAL with a critical alert, no relaunch."""
    d = _started()
    for _ in range(3):
        _fail_start(d)
        if d.st() == State.BACKOFF:
            d.advance(d.s.backoff.retry_at - d.now)  # type: ignore[operator]
    assert d.st() == State.FATAL
    assert "breaker.opened" in d.emits()
    assert d.alerts()[-1].severity == "critical"
    assert d.alerts()[-1].new_state == "FATAL"
    assert d.s.status_dict(d.now)["breaker"] == {
        "state": "open",
        "emergencies": 3,
        "window_s": 7200,
        "limit": 3,
    }
    acts = d.advance(3600, tick_every=10)
    assert not any(isinstance(a, RunPreflight | CreateAndStart) for a in acts)
    assert reply_of(d.send(StartRequested())).ok is False


def test_breaker_stays_closed_when_failures_spread_over_window() -> None:
    """Three failures more than 2 h apart in total never open the breaker."""
    d = _started()
    for _ in range(3):
        _fail_start(d)
        assert d.st() == State.BACKOFF
        d.advance(3700, tick_every=50)
        assert d.st() == State.PREFLIGHT
    assert d.s.breaker.count(d.now) <= 2


def test_fatal_realerts_every_period() -> None:
    """FATAL re-alerts every fatal_realert_s, and not in between."""
    d = _started(policy(breaker={"limit": 1}))
    _fail_start(d)
    assert d.st() == State.FATAL
    acts = d.advance(1799, tick_every=10)
    assert d.alerts(acts) == []
    acts = d.advance(1, tick_every=1)
    assert len(d.alerts(acts)) == 1
    acts = d.advance(3600, tick_every=10)
    assert len(d.alerts(acts)) == 2


def test_reset_leaves_fatal() -> None:
    """reset clears the breaker and starts again (intent RUN)."""
    d = _started(policy(breaker={"limit": 1}))
    _fail_start(d)
    acts = d.send(ResetRequested())
    assert d.st() == State.PREFLIGHT
    assert "breaker.reset" in d.emits(acts)
    assert reply_of(acts).ok is True
    assert not d.s.breaker.is_open(d.now)
    assert d.s.backoff.attempt == 0


def test_reset_outside_fatal_replies_and_clears() -> None:
    """reset in another state changes nothing but the breaker counts."""
    d = _started()
    _fail_start(d)
    assert d.st() == State.BACKOFF
    acts = d.send(ResetRequested())
    assert d.st() == State.BACKOFF
    assert reply_of(acts).message == "breaker closed"
    assert d.s.breaker.failures == ()


def test_probe_failures_degrade_then_recover() -> None:
    """A failed round degrades; a good round restores RUNNING and resets the count."""
    d = _started(
        policy(probes={"interval_s": 60.0, "failure_threshold": 5, "warmup_s": 0.0})
    )  # measured at once
    d.to_running()
    acts = d.advance(60)
    assert [a for a in acts if isinstance(a, RunProbeRound)] == [RunProbeRound(generation=True)]
    d.send(_round(health=False, gen=None, tokens=None, running=None, waiting=None))
    assert d.st() == State.DEGRADED
    assert d.s.consecutive_failures == 1
    d.send(_round(tokens=110.0))
    assert d.st() == State.RUNNING
    assert d.s.consecutive_failures == 0


def test_threshold_failures_trigger_emergency_then_backoff() -> None:
    """failure_threshold consecutive failures stop the container; its exit is a breaker failure."""
    d = _started()
    d.to_running()
    for i in range(5):
        d.advance(60)
        acts = d.send(_round(gen=False, tokens=100.0, running=0.0))
        assert (d.st() == State.STOPPING) == (i == 4)
    assert [a.reason for a in acts if isinstance(a, StopContainer)] == ["emergency"]
    # nothing to drain from a stuck engine: SIGKILL after stop.emergency_grace_s, not stop.grace_s
    assert [a.grace_s for a in acts if isinstance(a, StopContainer)] == [policy().stop.emergency_grace_s]
    assert policy().stop.emergency_grace_s < policy().stop.grace_s
    assert "emergency.stop" in d.emits(acts)
    d.send(ContainerExited(exit_code=143, signal=None, oom_killed=False))
    assert d.st() == State.BACKOFF
    assert d.s.emergencies == 1
    assert d.s.breaker.count(d.now) == 1
    # an emergency is not a failed start (no start.failed), but it ends the run with a ledger row
    assert [r.outcome for r in d.records()] == ["ready", "emergency"]
    assert "start.failed" not in d.emits()


def test_saturation_is_not_a_failure() -> None:
    """Failed generations while tokens advance under load are saturation, not failure."""
    d = _started()
    d.to_running()
    tokens = 1000.0
    for _ in range(10):
        d.advance(60)
        tokens += 5000
        d.send(_round(gen=False, running=8.0, waiting=20.0, tokens=tokens))
    assert d.st() == State.RUNNING
    assert d.s.consecutive_failures == 0
    assert d.emits().count("probe.inconclusive") == 1  # no token baseline yet on the first round
    assert d.emits().count("probe.saturated") == 9
    assert "probe.failed" not in d.emits()


def test_status_counts_the_probe_rounds_this_daemon_judged() -> None:
    """`status` liveness.rounds: every round judged while serving or draining, a failed one too; a daemon
    start counts from 0 (the daemon tests wait for "N more rounds judged" by it, not for a time)."""
    d = _started()
    d.to_running()
    assert d.s.status_dict(d.now)["liveness"]["rounds"] == 0
    for ok in (True, False, True):
        d.advance(60)
        d.send(_round(health=ok, gen=None if not ok else True))
    assert d.s.status_dict(d.now)["liveness"]["rounds"] == 3
    assert d.send(RestartRequested())  # RUNNING -> DRAINING: its rounds are judged as serving ones are
    assert d.st() == State.DRAINING
    d.send(_round(running=1.0))
    assert d.s.probe_rounds == 4
    d.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))  # persisted, read back
    d.send(DaemonStarted(boot_changed=False))
    assert d.s.status_dict(d.now)["liveness"]["rounds"] == 0


def test_stuck_engine_escalates_within_interval_times_threshold() -> None:
    """Health 200, a request running, frozen tokens: emergency within 60 s x 5 of the first frozen round."""
    d = _started()
    d.to_running()
    d.advance(60)
    d.send(_round(gen=None, running=1.0, tokens=500.0))
    first_frozen = d.now
    while d.st() != State.STOPPING and d.now - first_frozen < 1000:
        d.advance(60)
        d.send(_round(gen=None, running=1.0, tokens=500.0))
    assert d.st() == State.STOPPING
    assert d.now - first_frozen <= 60 * 5
    assert "probe.stalled" in d.emits()


def test_idle_engine_is_not_stalled() -> None:
    """Frozen tokens with nothing running is idle, and a request after idleness is not a stall."""
    d = _started()
    d.to_running()
    for _ in range(10):
        d.advance(60)
        d.send(_round(running=0.0, tokens=500.0))
    d.advance(60)
    d.send(_round(running=1.0, tokens=500.0))
    assert d.st() == State.RUNNING
    assert "probe.stalled" not in d.emits()


def test_exit_zero_while_running_is_a_failure() -> None:
    """vLLM exits 0 when its engine dies: still a failure, restarted after backoff."""
    d = _started()
    d.to_running()
    acts = d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False, container_id="c1"))
    assert d.st() == State.BACKOFF
    assert d.s.breaker.count(d.now) == 1
    assert [a.severity for a in d.alerts(acts)] == ["critical"]


def test_kill_is_recovered() -> None:
    """A kill -9 (exit 137) leads to BACKOFF, then PREFLIGHT and a fresh start, then a recovered alert."""
    d = _started()
    d.to_running()
    d.send(ContainerExited(exit_code=137, signal=None, oom_killed=False))
    assert d.s.intent == "run"
    d.advance(30)
    assert d.st() == State.PREFLIGHT
    d.to_running(cid="c2")
    assert d.s.container_id == "c2"
    assert d.alerts()[-1].severity == "info"
    assert d.s.restarts == 1


def test_engine_dead_log_is_an_emergency() -> None:
    """An engine-death log line while RUNNING stops at once."""
    d = _started()
    d.to_running()
    acts = d.send(LogEngineDead(detail="EngineCore encountered a fatal error"))
    assert d.st() == State.STOPPING
    assert any(isinstance(a, StopContainer) and a.reason == "emergency" for a in acts)


def test_external_stop_is_a_manual_stop() -> None:
    """A docker stop by a human: STOPPED, intent stop, warning alert; start resumes."""
    d = _started()
    d.to_running()
    acts = d.send(ContainerExited(exit_code=0, signal="SIGTERM", oom_killed=False))
    assert d.st() == State.STOPPED
    assert d.s.intent == "stop"
    assert [a for a in acts if isinstance(a, CheckExternalStop)]  # operator, or dockerd going down?
    assert d.alerts(acts) == []
    acts = d.send(ExternalStopChecked(engine_restarting=False))  # Docker kept answering: an operator
    assert "container.stopped_externally" in d.emits(acts)
    assert [a.severity for a in d.alerts(acts)] == ["warning"]
    assert d.s.breaker.failures == ()
    d.advance(3600, tick_every=60)
    assert d.st() == State.STOPPED
    d.send(StartRequested())
    assert d.st() == State.PREFLIGHT
    assert d.s.intent == "run"


def test_manual_stop_survives_daemon_restart() -> None:
    """stop, persist, restart the daemon with the container running anyway: still STOPPED, untouched."""
    d = _started()
    d.to_running()
    acts = d.send(StopRequested())
    assert [a.reason for a in acts if isinstance(a, StopContainer)] == ["operator_stop"]
    d.send(ContainerStopped())
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))  # duplicate, after the stop
    assert d.st() == State.STOPPED
    d2 = Driver(now=d.now + 100)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=True))
    acts = d2.send(ContainerObserved(container_id="x", running=True, exit_code=None))
    assert d2.st() == State.STOPPED
    assert d2.emits(acts) == ["adopt.skipped_manual_stop"]
    assert not any(isinstance(a, WatchContainer | CreateAndStart | StopContainer) for a in acts)


def test_adoption_of_running_container() -> None:
    """A running container at daemon start is adopted: no CreateAndStart, health alone suffices."""
    d = _started()
    d.to_running()
    d2 = Driver(now=d.now + 5)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=False))
    acts = d2.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    assert d2.st() == State.STARTING
    assert WatchContainer("c1") in acts
    acts += d2.advance(2)
    assert any(isinstance(a, ProbeHealth) for a in acts)
    acts += d2.send(OK_HEALTH)
    assert any(isinstance(a, RunFirstGeneration) for a in acts)
    acts += d2.send(FirstGeneration(ok=True, latency_ms=100.0, error=None))
    assert d2.st() == State.RUNNING
    assert not any(isinstance(a, CreateAndStart | StopContainer) for a in d2.log)
    assert d2.records() == []  # not a start of ours


def test_adopted_container_gets_grace_with_progress() -> None:
    """An adopted, still-loading container is given adopt_grace_s, extended by progress."""
    d = Driver()
    d.send(DaemonStarted(boot_changed=False))
    d.send(ContainerObserved(container_id="c9", running=True, exit_code=None))
    for _ in range(12):
        d.advance(100, tick_every=5)
        d.send(BAD_HEALTH)
        d.send(LogProgress(pct=None, phase="warmup"))
    assert d.st() == State.STARTING
    d.advance(900, tick_every=5)
    assert d.st() == State.STOPPING


def test_persisted_open_breaker_survives() -> None:
    """An open breaker persisted to JSON comes back FATAL after a daemon restart (same boot)."""
    d = _started(policy(breaker={"limit": 1}))
    _fail_start(d)
    d2 = Driver(now=d.now + 10_000)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=False))
    d2.send(ContainerObserved(container_id=None, running=False, exit_code=None))
    assert d2.st() == State.FATAL


def test_reboot_rearms_breaker_when_policy_says_so() -> None:
    """A changed boot id re-arms the breaker (reboot_rearms_breaker), else it stays FATAL."""
    for rearm, expected in ((True, State.PREFLIGHT), (False, State.FATAL)):
        d = _started(policy(reboot_rearms_breaker=rearm, breaker={"limit": 1}))
        _fail_start(d)
        d.send(DaemonStarted(boot_changed=True))
        d.send(ContainerObserved(container_id=None, running=False, exit_code=None))
        assert d.st() == expected
        assert ("breaker.reset" in d.emits()) == rearm


def test_persisted_backoff_in_future_stays_backoff() -> None:
    """A persisted BACKOFF whose retry time is still ahead stays BACKOFF after a daemon restart."""
    d = _started(policy(probes={"interval_s": 60.0, "failure_threshold": 5}, backoff={"initial_s": 30.0}))
    _fail_start(d)
    d.now += 10
    d.send(DaemonStarted(boot_changed=False))
    d.send(ContainerObserved(container_id=None, running=False, exit_code=None))
    assert d.st() == State.BACKOFF
    d.advance(20)
    assert d.st() == State.PREFLIGHT


def test_graceful_restart_drains_and_is_not_a_failure() -> None:
    """restart: DRAINING until no request runs, then STOPPING, then PREFLIGHT; the breaker is untouched."""
    d = _started()
    d.to_running()
    acts = d.send(RestartRequested())
    assert d.st() == State.DRAINING
    assert PollDrain() in acts
    d.send(DrainProgress(requests_running=3.0))
    acts = d.advance(2)
    assert PollDrain() in acts
    acts = d.send(DrainProgress(requests_running=0.0))
    assert [a.reason for a in acts if isinstance(a, StopContainer)] == ["restart"]
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    assert d.st() == State.PREFLIGHT
    d.send(ContainerStopped())  # the stop action's own completion, late: ignored
    assert d.st() == State.PREFLIGHT
    assert d.s.breaker.failures == ()
    assert d.s.backoff.attempt == 0


def test_drain_timeout_stops_anyway() -> None:
    """A drain that never empties stops after drain_timeout_s."""
    d = _started()
    d.to_running()
    d.send(RestartRequested())
    d.advance(599, tick_every=2)
    assert d.st() == State.DRAINING
    d.advance(1)
    assert d.st() == State.STOPPING


def test_maintenance_smoke_test_failure_alerts() -> None:
    """maintenance: drain, stop, start; a failed smoke test (first generation) raises a critical alert."""
    d = _started()
    d.to_running()
    d.send(MaintenanceRequested())
    assert d.st() == State.MAINTENANCE
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    assert d.st() == State.PREFLIGHT
    d.to_starting(cid="c2")
    d.send(LogReady())
    _first_generation_fails(d, d.policy.probes.failure_threshold)
    d.send(ContainerStopped())
    assert any(a.title == "maintenance restart failed" for a in d.alerts())


def test_first_generation_retry_that_succeeds_is_a_normal_start() -> None:
    """A cold first request that times out once, then answers: RUNNING, no breaker record."""
    d = _started()
    d.to_starting()
    d.send(LogReady())
    _first_generation_fails(d, 1)
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=900.0, error=None))
    assert d.st() == State.RUNNING
    assert len(d.s.breaker.failures) == 0
    assert d.records()[-1].outcome == "ready"


def test_docker_unreachable_at_create_postpones_without_breaker() -> None:
    """A create that fails because Docker does not answer is postponed (BACKOFF), not a failed start."""
    d = _started(policy(breaker={"limit": 1}))
    d.send(StartRequested())
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    assert d.st() == State.STARTING
    d.send(ContainerStartFailed(error="engine unreachable", transient=True))
    assert d.st() == State.BACKOFF
    assert len(d.s.breaker.failures) == 0
    assert not d.s.slot_held
    assert "start.deferred" in d.emits()


def test_docker_back_after_a_deferred_create_starts_at_once() -> None:
    """The deferred create asks for Docker to be watched until the backoff retry; Docker seen down then
    answering -> PREFLIGHT now; answering without having looked down (or still down) -> the backoff."""
    d = _started(policy(breaker={"limit": 1}, backoff={"initial_s": 8.0}))
    d.send(StartRequested())
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    acts = d.send(ContainerStartFailed(error="engine unreachable", transient=True))
    waits = [a for a in acts if isinstance(a, WaitDocker)]
    assert [w.limit_s for w in waits] == [8.0]
    for quiet in (DockerAnswered(ok=False, was_down=True), DockerAnswered(ok=True, was_down=False)):
        assert not any(isinstance(a, RunPreflight) for a in d.send(quiet))
        assert d.st() == State.BACKOFF
    d.advance(1.5)
    acts = d.send(DockerAnswered(ok=True, was_down=True))
    assert d.st() == State.PREFLIGHT
    assert any(isinstance(a, RunPreflight) for a in acts)
    assert "docker.answering_again" in d.emits(acts)
    assert len(d.s.breaker.failures) == 0
    d.send(StopRequested())  # a late answer in another state changes nothing
    before = d.st()
    assert d.send(DockerAnswered(ok=True, was_down=True)) == []
    assert d.st() == before


def test_backoff_attempts_reset_after_healthy_period() -> None:
    """After backoff_reset_after_s healthy the failure streak is forgotten: a crash is the first failure of
    a new streak, retried at once (a run that served ended, as Docker's restart policies do); the next
    failure waits initial_s x factor."""
    d = _started(policy(breaker={"limit": 100}, backoff={"initial_s": 30.0}))
    _fail_start(d)
    d.advance(30)
    _fail_start(d)
    d.advance(60)
    d.to_running()
    assert d.s.backoff.attempt == 2
    for _ in range(42):  # a round every probe interval (15 s), each answered with its generation
        d.advance(15)
        d.send(_round())
    assert d.s.backoff.attempt == 0
    d.send(CRASH)
    assert d.s.backoff.retry_at == d.now
    assert d.st() == State.BACKOFF
    assert d.s.retry_due(d.now)  # the loop ticks it at once (daemon/loop.py)
    _fail_start(d)  # the restarted server fails to start: the streak goes on
    assert d.s.backoff.attempt == 2
    assert d.s.backoff.retry_at == d.now + 60
    assert not d.s.retry_due(d.now)


def test_operator_stop_during_start_records_stopped() -> None:
    """stop while STARTING stops the container, releases the slot and records outcome 'stopped'."""
    d = _started()
    d.to_starting()
    d.send(StopRequested())
    assert d.st() == State.STOPPING
    acts = d.send(ContainerStopped())
    assert d.st() == State.STOPPED
    assert ReleaseSlot() in acts
    assert d.records()[-1].outcome == "stopped"
    assert d.s.breaker.failures == ()


def test_preflight_failure_backs_off_without_breaker_record() -> None:
    """A failed preflight goes to BACKOFF, alerts once per streak, never counts in the breaker."""
    d = _started()
    for _ in range(4):
        d.send(PreflightDone(ok=False, detail="MemAvailable 20 GiB < 100 GiB", mem_available_gib=20.0))
        assert d.st() == State.BACKOFF
        d.advance(d.s.backoff.retry_at - d.now)  # type: ignore[operator]
        assert d.st() == State.PREFLIGHT
    assert d.s.breaker.failures == ()
    assert len(d.alerts()) == 1


def test_late_exit_of_old_container_is_ignored() -> None:
    """An exit event of the previous container arriving during the next start changes nothing."""
    d = _started()
    d.to_running(cid="old")
    d.send(RestartRequested())
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    d.to_starting(cid="new")
    before = d.s
    acts = d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False, container_id="old"))
    assert acts == []
    assert d.s == before


def test_wall_clock_jump_backwards_caps_waits() -> None:
    """After the clock steps back a day, BACKOFF waits at most backoff_max_s, FATAL keeps re-alerting."""
    d = _started()
    _fail_start(d)
    d.now -= 86_400
    d.advance(1)
    assert d.s.backoff.retry_at is not None
    assert 0 <= d.s.backoff.retry_at - d.now <= 900
    d.advance(900, tick_every=10)
    assert d.st() == State.PREFLIGHT


def test_starting_deadline_capped_after_backwards_jump() -> None:
    """A load deadline far in the future after a backwards jump is capped to startup_deadline_s."""
    d = _started()
    d.to_starting()
    d.now -= 86_400
    d.send(LogProgress(pct=1.0, phase="weights"))
    for _ in range(20):
        d.advance(100, tick_every=10)
        d.send(LogProgress(pct=2.0, phase="weights"))
    assert d.st() == State.STOPPING


def _restarted(d: Driver, after_s: float = 10.0) -> Driver:
    """A new daemon process on the persisted (JSON round-tripped) snapshot of ``d``, same boot."""
    d2 = Driver(policy=d.policy, now=d.now + after_s)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=False))
    return d2


def test_ticks_before_the_container_is_observed_decide_nothing() -> None:
    """Docker silent at daemon start: a persisted RUNNING/STARTING profile is neither probed nor timed out."""
    d = _started(policy(probes={"interval_s": 15.0, "failure_threshold": 3}, startup={"deadline_s": 60.0}))
    d.to_running()
    d2 = _restarted(d)  # no ContainerObserved: Docker did not answer
    acts = d2.advance(1800, tick_every=1)
    assert d2.st() == State.RUNNING
    assert not any(isinstance(a, RunProbeRound | StopContainer | RunPreflight) for a in acts)
    d3 = _started(policy(startup={"deadline_s": 60.0, "silence_timeout_s": 30.0}))
    d3.to_starting()
    d4 = _restarted(d3, after_s=120.0)  # the persisted load deadline is long past
    acts = d4.advance(300, tick_every=1)
    assert d4.st() == State.STARTING
    assert not any(isinstance(a, StopContainer) for a in acts)
    d4.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    assert d4.st() == State.STARTING
    assert d4.s.adopted  # then adopted as usual


def test_operator_stop_interrupted_by_a_daemon_restart_is_finished() -> None:
    """Daemon killed while STOPPING for an operator stop, container still up: the new daemon stops it."""
    d = _started()
    d.to_running()
    d.send(StopRequested())
    assert d.st() == State.STOPPING
    d2 = _restarted(d)
    acts = d2.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    assert [a.container_id for a in acts if isinstance(a, StopContainer)] == ["c1"]
    assert d2.st() == State.STOPPING
    assert not any(isinstance(a, WatchContainer | CreateAndStart) for a in acts)
    d2.send(ContainerStopped())
    assert d2.st() == State.STOPPED
    assert d2.s.intent == "stop"


def test_emergency_interrupted_by_a_daemon_restart_still_counts() -> None:
    """Daemon killed mid emergency stop: the failure still reaches the breaker (and backoff)."""
    d = _started(policy(breaker={"limit": 2}))
    d.to_running()
    d.send(LogEngineDead(detail="EngineDeadError"))
    assert d.st() == State.STOPPING
    d2 = _restarted(d)
    d2.send(ContainerObserved(container_id="c1", running=False, exit_code=0))
    assert len(d2.s.breaker.failures) == 1
    assert d2.st() == State.BACKOFF
    # a failed start interrupted the same way counts too: the second failure opens the breaker
    d2.advance(60)
    d2.to_starting(cid="c2")
    d2.send(LogStartupFailure(outcome="failed_oom", detail="CUDA out of memory"))
    d2.advance(200)  # the shortened deadline passes: StopContainer, STOPPING (failed_start)
    assert d2.st() == State.STOPPING
    d3 = _restarted(d2)
    d3.send(ContainerObserved(container_id="c2", running=False, exit_code=1))
    assert d3.st() == State.FATAL


def test_stop_during_maintenance_cancels_the_maintenance() -> None:
    """An operator stop during MAINTENANCE: the next start is not a maintenance smoke test."""
    d = _started()
    d.to_running()
    d.send(MaintenanceRequested())
    d.send(StopRequested())
    d.send(ContainerStopped())
    assert d.st() == State.STOPPED
    d.send(StartRequested())
    d.to_starting(cid="c2")
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=False, latency_ms=None, error="500"))
    d.send(ContainerStopped())
    assert not any(a.title == "maintenance restart failed" for a in d.alerts())


def test_adopted_server_failing_one_generation_is_judged_by_probe_rounds() -> None:
    """A busy adopted server whose first generation times out is not bounced: DEGRADED, rounds decide."""
    d = _started(policy(probes={"interval_s": 15.0, "failure_threshold": 3}))
    d.to_running()
    d2 = _restarted(d)
    d2.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    d2.send(OK_HEALTH)
    acts = d2.send(FirstGeneration(ok=False, latency_ms=None, error="timeout"))
    assert not any(isinstance(a, StopContainer) for a in acts)
    assert d2.st() == State.DEGRADED
    assert d2.s.consecutive_failures == 1
    assert d2.s.breaker.failures == ()
    # saturated (tokens advancing under load): still no emergency; then a good round recovers
    d2.advance(15)
    d2.send(_round(gen=False, running=8.0, waiting=4.0, tokens=1000.0))
    d2.advance(15)
    d2.send(_round(gen=False, running=8.0, waiting=4.0, tokens=5000.0))
    assert d2.st() == State.DEGRADED
    d2.advance(15)
    d2.send(_round(tokens=6000.0))
    assert d2.st() == State.RUNNING
    assert not any(isinstance(a, StopContainer) for a in d2.log)
    # a really dead adopted server still reaches the emergency through the rounds
    d3 = _restarted(d)
    d3.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    d3.send(OK_HEALTH)
    d3.send(FirstGeneration(ok=False, latency_ms=None, error="timeout"))
    for _ in range(3):
        d3.advance(15)
        d3.send(_round(health=False, gen=False, running=None, waiting=None, tokens=None))
    assert d3.st() == State.STOPPING
    assert d3.s.pending == "emergency"


def test_adopted_load_in_progress_holds_the_load_slot() -> None:
    """A container adopted mid-load takes the load slot (loads stay serialized), released when serving."""
    d = Driver()
    d.send(DaemonStarted(boot_changed=False))
    acts = d.send(ContainerObserved(container_id="c9", running=True, exit_code=None))
    assert any(isinstance(a, AcquireSlot) for a in acts)
    d.send(SlotAcquired())
    assert d.st() == State.STARTING
    assert d.s.slot_held
    d.advance(2)
    d.send(OK_HEALTH)
    acts = d.send(FirstGeneration(ok=True, latency_ms=100.0, error=None))
    assert d.st() == State.RUNNING
    assert any(isinstance(a, ReleaseSlot) for a in acts)
    assert not d.s.slot_held


def test_dockerd_shutting_down_is_not_a_manual_stop() -> None:
    """dockerd stops every container with SIGTERM on its way down: once Docker stopped answering the
    profile starts again (PREFLIGHT, intent run), with no breaker record and no manual-stop alert."""
    d = _started()
    d.to_running()
    d.send(ContainerExited(exit_code=0, signal="SIGTERM", oom_killed=False))
    acts = d.send(ExternalStopChecked(engine_restarting=True))
    assert d.st() == State.PREFLIGHT
    assert d.s.intent == "run"
    assert d.s.breaker.failures == ()
    assert "container.stopped_by_docker_restart" in d.emits(acts)
    assert "container.stopped_externally" not in d.emits()
    assert [a.title for a in d.alerts(acts)] == ["Docker engine restarted: starting the model server again"]


def test_a_late_engine_answer_after_an_operator_start_changes_nothing() -> None:
    """An operator start while the engine check runs wins; the late answer is ignored."""
    d = _started()
    d.to_running()
    d.send(ContainerExited(exit_code=0, signal="SIGTERM", oom_killed=False))
    d.send(StartRequested())
    assert d.st() == State.PREFLIGHT
    assert d.alerts(d.send(ExternalStopChecked(engine_restarting=False))) == []
    assert d.st() == State.PREFLIGHT


def test_an_emergency_grace_is_capped_by_the_stop_grace() -> None:
    """A profile whose stop.grace_s is shorter than emergency_grace_s keeps its shorter grace."""
    d = _started(policy(stop={"grace_s": 3.0, "emergency_grace_s": 10.0}))
    d.to_running()
    acts = d.send(LogEngineDead(detail="EngineCore died"))
    assert [a.grace_s for a in acts if isinstance(a, StopContainer)] == [3.0]

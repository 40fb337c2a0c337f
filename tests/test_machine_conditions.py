"""The machine's raising and resolving alerts (docs/alerts.md "Raised and resolved"), with a plain ``now``:
breaker reset (who), auth enforced, reserve ok, maintenance started/cancelled, degraded and recovered."""

from __future__ import annotations

import json
from dataclasses import replace

from supervisor.core.actions import Action, Alert, Emit
from supervisor.core.alerts.conditions import Conditions
from supervisor.core.events import (
    AuthResult,
    ContainerExited,
    ContainerObserved,
    ContainerStopped,
    DaemonStarted,
    DrainProgress,
    FirstGeneration,
    HandoverRequested,
    LogKvPool,
    LogReady,
    LogStartupFailure,
    MaintenanceRequested,
    ProbeRound,
    ResetRequested,
    RestartRequested,
    StopRequested,
)
from supervisor.core.host_events import ReserveMeasured
from supervisor.core.machine import Policy
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy

CRASH = ContainerExited(exit_code=1, signal=None, oom_killed=False)
SIGTERM = ContainerExited(exit_code=143, signal="SIGTERM", oom_killed=False)


def _kinds(acts: list[Action]) -> list[str]:
    return [a.kind for a in acts if isinstance(a, Alert)]


def _only(acts: list[Action], kind: str) -> Alert:
    [alert] = [a for a in acts if isinstance(a, Alert) and a.kind == kind]
    return alert


def _round(ok: bool, tokens: float = 100.0) -> ProbeRound:
    return ProbeRound(
        health_ok=True,
        health_status=200,
        gen_ok=ok,
        gen_latency_ms=50.0 if ok else None,
        gen_error=None if ok else "timeout",
        requests_running=0.0,
        requests_waiting=0.0,
        generation_tokens_total=tokens,
    )


def _running(pol: Policy | None = None, tokens: int | None = 1_013_816) -> Driver:
    d = Driver(policy=pol or policy(probes={"interval_s": 60.0, "failure_threshold": 3}))
    fresh_boot(d)
    d.to_starting()
    if tokens is not None:
        d.send(LogKvPool(tokens=tokens, max_concurrency=4.0))
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=200.0, error=None))
    assert d.st() == State.RUNNING
    return d


def _fatal() -> Driver:
    d = Driver(policy=policy(breaker={"limit": 1}))
    fresh_boot(d)
    d.to_starting()
    d.send(LogStartupFailure(outcome="failed_oom", detail="CUDA out of memory"))
    d.send(CRASH)
    assert d.st() == State.FATAL
    return d


# ---- breaker ----------------------------------------------------------------------------------------


def test_reset_says_who_reset_the_breaker() -> None:
    """FATAL + reset by uid 0: info 'circuit breaker reset by root (uid 0)', FATAL -> PREFLIGHT."""
    d = _fatal()
    acts = d.send(ResetRequested(uid=0, user="root"))
    alert = _only(acts, "breaker.reset")
    assert (alert.severity, alert.title) == ("info", "circuit breaker reset by root (uid 0)")
    assert (alert.old_state, alert.new_state, alert.reason) == ("FATAL", "PREFLIGHT", "operator reset")
    assert ("by", "root (uid 0)") in alert.params
    [emit] = [a for a in acts if isinstance(a, Emit) and a.name == "breaker.reset"]
    assert emit.fields == {"reason": "operator", "uid": 0, "user": "root"}


def test_reset_without_a_name_or_a_uid() -> None:
    """A uid the password database does not know, or no uid at all (an in-process caller)."""
    assert _only(_fatal().send(ResetRequested(uid=4321)), "breaker.reset").title.endswith("by uid 4321")
    assert _only(_fatal().send(ResetRequested()), "breaker.reset").title.endswith("by the operator")


def test_reset_with_nothing_to_reset_is_no_news() -> None:
    """No failure recorded, not FATAL: 'breaker closed' and no alert."""
    d = _running()
    assert _kinds(d.send(ResetRequested(uid=0, user="root"))) == []


def test_a_reboot_rearming_the_breaker_resolves_it() -> None:
    """The breaker latches (no window expiry closes it): a reboot re-arm is the other way it closes."""
    d = _fatal()
    rearming = replace(d.policy, reboot_rearms_breaker=True)  # opt-in: the product default is False
    d2 = Driver(policy=rearming, now=d.now + 600)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    acts = d2.send(DaemonStarted(boot_changed=True))
    alert = _only(acts, "breaker.reset")
    assert alert.title == "circuit breaker reset by a host reboot"
    d3 = Driver(policy=rearming, now=d.now + 600)
    d3.s = d2.s
    assert _kinds(d3.send(DaemonStarted(boot_changed=True))) == []  # nothing left to re-arm


# ---- auth, reserve ----------------------------------------------------------------------------------


def test_auth_open_then_enforced() -> None:
    """open (critical) then enforced: an info auth.enforced the tracker pairs with the open one."""
    d = Driver(policy=policy(api_key_configured=True))
    fresh_boot(d)
    d.to_starting()
    d.send(LogReady())
    d.send(OK_HEALTH)
    assert [a.severity for a in d.alerts(d.send(AuthResult("open")))] == ["critical"]
    alert = _only(d.send(AuthResult("enforced", url="http://127.0.0.1:8000/v1/models")), "auth.enforced")
    assert (alert.severity, alert.title) == ("info", "API key enforced again")
    assert "127.0.0.1:8000" in alert.reason
    assert _kinds(d.send(AuthResult("enforced"))) == []  # no flip, nothing


def test_reserve_low_then_ok() -> None:
    """reserve.low after one load, the reserve met after the next: reserve.ok with the numbers."""
    d = _running(policy(host={"reserve_gib": 15.0}))
    assert [a.title for a in d.alerts(d.send(ReserveMeasured(9.8)))] == [
        "host memory reserve too small after load"
    ]
    alert = _only(d.send(ReserveMeasured(40.0)), "reserve.ok")
    assert alert.severity == "info"
    assert alert.reason == "MemAvailable 40.0 GiB after the load, reserve 15 GiB"


# ---- maintenance ------------------------------------------------------------------------------------


def test_maintenance_started_with_the_kv_pool_before() -> None:
    """RUNNING -> MAINTENANCE: an info maintenance.started naming the pool; a plain restart sends none."""
    d = _running()
    alert = _only(d.send(MaintenanceRequested()), "maintenance.started")
    assert (alert.severity, alert.old_state, alert.new_state) == ("info", "RUNNING", "MAINTENANCE")
    assert alert.title == "maintenance restart begun: KV pool 1,013,816 tokens"
    assert _kinds(_running().send(RestartRequested())) == []
    unknown = _only(_running(tokens=None).send(MaintenanceRequested()), "maintenance.started")
    assert unknown.title == "maintenance restart begun: KV pool unknown tokens"


def test_maintenance_started_then_done_resolves_through_the_tracker() -> None:
    """started ... done: the tracker sends the done as the resolved message, with how long it took."""
    d = _running()
    tracker, sent = Conditions(), []

    def track(acts: list[Action]) -> None:
        nonlocal tracker
        for a in d.alerts(acts):
            kind = a.kind or ("maintenance.done" if a.title.startswith("maintenance done") else "")
            verdict, tracker = tracker.decide("p", Alert(a.severity, a.title, "", "", "", kind=kind), d.now)
            sent.extend([(kind, [c.detail() for c in verdict.cleared])] if verdict.send else [])

    track(d.send(MaintenanceRequested()))
    d.advance(5)
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    d.to_starting(cid="c2")
    d.send(LogKvPool(tokens=900_000, max_concurrency=4.0))
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.advance(120)
    track(d.send(FirstGeneration(ok=True, latency_ms=150.0, error=None)))
    assert sent == [("maintenance.started", []), ("maintenance.done", [("took", "2 min")])]


def test_a_stop_cancels_a_maintenance_restart() -> None:
    """Operator stop, an outside SIGTERM or a seat handover: maintenance.cancelled resolves the started."""
    d = _running()
    d.send(MaintenanceRequested())
    alert = _only(d.send(StopRequested()), "maintenance.cancelled")
    assert alert.title == "maintenance restart cancelled: operator stop"
    assert not d.s.maintenance_run
    d = _running()
    d.send(MaintenanceRequested())
    acts = d.send(SIGTERM)
    assert d.st() == State.STOPPED
    assert _only(acts, "maintenance.cancelled").reason == "container stopped from outside"
    d = _running()
    d.send(MaintenanceRequested())
    assert (
        _only(d.send(HandoverRequested(to="other")), "maintenance.cancelled").reason
        == "seat handover to other"
    )
    assert _kinds(_running().send(StopRequested())) == []  # no maintenance under way: nothing


# ---- degraded and recovered -------------------------------------------------------------------------


def test_degraded_with_the_probe_failure_then_recovered() -> None:
    """RUNNING -> DEGRADED: a warning naming the failure (once); DEGRADED -> RUNNING: 'recovered'."""
    d = _running()
    d.advance(60)
    alert = _only(d.send(_round(ok=False)), "degraded")
    assert (alert.severity, alert.old_state, alert.new_state) == ("warning", "RUNNING", "DEGRADED")
    assert alert.reason == "generation probe failed (1 of 3 failures before an emergency stop): timeout"
    d.advance(60)
    assert _kinds(d.send(_round(ok=False, tokens=100.0))) == []  # still degraded: nothing new
    d.advance(60)
    acts = d.send(_round(ok=True, tokens=120.0))
    assert d.st() == State.RUNNING
    rec = _only(acts, "recovered")
    assert (rec.severity, rec.title, rec.old_state, rec.reason) == (
        "info",
        "recovered: serving again",
        "DEGRADED",
        "probe ok",
    )


def test_adopted_server_failing_its_first_generation_is_degraded() -> None:
    """A daemon restart adopts a server whose first generation fails: DEGRADED with a warning."""
    d = _running()
    d2 = Driver(policy=d.policy, now=d.now + 10)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=False))
    d2.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    d2.send(OK_HEALTH)
    acts = d2.send(FirstGeneration(ok=False, latency_ms=None, error="timeout"))
    assert d2.st() == State.DEGRADED
    assert _only(acts, "degraded").reason == "first generation failed (adopted): timeout"


def test_leaving_degraded_by_a_restart_resolves_on_the_next_running() -> None:
    """DEGRADED -> restart -> RUNNING: 'recovered' (today nothing said the degraded server was fine)."""
    d = _running()
    d.advance(60)
    d.send(_round(ok=False))
    d.send(RestartRequested())
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    d.to_starting(cid="c2")
    d.send(LogReady())
    d.send(OK_HEALTH)
    acts = d.send(FirstGeneration(ok=True, latency_ms=150.0, error=None))
    assert _only(acts, "recovered").old_state == "STARTING"


def test_serving_again_after_a_crash_is_a_recovered_alert() -> None:
    """container died -> BACKOFF -> ... -> RUNNING: the 'recovered' resolving the 'serving' condition."""
    d = _running(policy(probes={"interval_s": 60.0, "failure_threshold": 3}, backoff={"initial_s": 5.0}))
    d.send(CRASH)
    assert d.st() == State.BACKOFF
    d.advance(10)
    d.to_starting(cid="c2")
    d.send(LogReady())
    d.send(OK_HEALTH)
    acts = d.send(FirstGeneration(ok=True, latency_ms=150.0, error=None))
    assert _only(acts, "recovered").reason == "first generation ok"

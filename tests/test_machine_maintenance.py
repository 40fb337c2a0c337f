"""The machine's side of a maintenance restart: its drain bound, and the KV pool before/after alert."""

from __future__ import annotations

from supervisor.core.actions import Action, Emit
from supervisor.core.events import (
    ContainerStopped,
    DrainProgress,
    FirstGeneration,
    LogKvPool,
    LogReady,
    MaintenanceRequested,
    RestartRequested,
)
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy


def emitted(actions: list[Action], name: str) -> list[dict[str, object]]:
    """The fields of every Emit called `name`."""
    return [a.fields for a in actions if isinstance(a, Emit) and a.name == name]


POLICY = policy(
    probes={"interval_s": 60.0}, stop={"drain_timeout_s": 30.0}, maintenance={"drain_timeout_s": 300.0}
)


def _running(tokens: int | None = 1_013_816) -> Driver:
    d = Driver(policy=POLICY)
    fresh_boot(d)
    d.to_starting()
    if tokens is not None:
        d.send(LogKvPool(tokens=tokens, max_concurrency=4.0))
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=200.0, error=None))
    assert d.st() == State.RUNNING
    return d


def test_maintenance_drain_waits_maintenance_drain_timeout_s() -> None:
    """A maintenance drain that never empties stops after the daemon's maintenance.drain_timeout_s."""
    d = _running()
    d.send(MaintenanceRequested())
    assert d.s.drain_deadline == d.now + 300.0
    d.advance(299, tick_every=2)
    assert d.st() == State.MAINTENANCE  # the profile's 30 s restart bound does not apply
    actions = d.advance(1)
    assert d.st() == State.STOPPING
    assert emitted(actions, "drain.timeout") == [{"drain_s": 300.0}]


def test_restart_drain_waits_the_profiles_drain_timeout_s() -> None:
    """An operator restart drains for the profile's stop.drain_timeout_s, not the maintenance bound."""
    d = _running()
    d.send(RestartRequested())
    d.advance(29)
    assert d.st() == State.DRAINING
    d.advance(1)
    assert d.st() == State.STOPPING


def _maintain(d: Driver, tokens_after: int | None) -> None:
    d.send(MaintenanceRequested())
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    assert d.st() == State.PREFLIGHT
    # the KV pool of the old container is carried in the (persisted) snapshot across the restart
    back = ProfileState.from_dict(d.s.to_dict())
    assert back.maintenance_kv_before == 1_013_816
    d.s = back
    d.to_starting(cid="c2")
    assert d.s.kv.tokens is None
    if tokens_after is not None:
        d.send(LogKvPool(tokens=tokens_after, max_concurrency=4.0))
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.log.clear()
    d.send(FirstGeneration(ok=True, latency_ms=150.0, error=None))
    assert d.st() == State.RUNNING


def test_maintenance_done_alerts_info_with_the_kv_pool_before_and_after() -> None:
    """Success: maintenance.done with kv_before/kv_after and an INFO alert naming both."""
    d = _running()
    _maintain(d, 1_013_816)
    [alert] = d.alerts()
    assert alert.severity == "info"
    assert alert.title == "maintenance done: KV pool 1,013,816 -> 1,013,816 tokens"
    assert emitted(d.log, "maintenance.done") == [{"kv_before": 1_013_816, "kv_after": 1_013_816}]
    assert d.s.maintenance_kv_before is None


def test_maintenance_done_says_unknown_when_the_new_pool_was_not_logged() -> None:
    """No KV pool line in the new container's log: the alert says 'unknown' rather than a wrong number."""
    d = _running()
    _maintain(d, None)
    assert [a.title for a in d.alerts()] == ["maintenance done: KV pool 1,013,816 -> unknown tokens"]


def test_a_plain_restart_sends_no_maintenance_alert() -> None:
    """Only a maintenance restart sends the maintenance-done alert."""
    d = _running()
    d.send(RestartRequested())
    assert d.s.maintenance_kv_before is None
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    d.to_starting(cid="c2")
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=150.0, error=None))
    assert not [a for a in d.alerts() if a.title.startswith("maintenance done")]

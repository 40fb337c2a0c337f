"""A start adopted mid-load still gets its ledger row; an adopted server that was already serving does not."""

from __future__ import annotations

import json

from supervisor.core.actions import Emit
from supervisor.core.events import (
    ContainerInfo,
    ContainerObserved,
    DaemonStarted,
    FirstGeneration,
    LogKvPool,
    LogReady,
)
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import BAD_HEALTH, OK_HEALTH, Driver, fresh_boot


def _daemon_killed_mid_load(load_before_kill_s: float) -> tuple[Driver, float]:
    """Our start, loading for ``load_before_kill_s``; a new daemon (its state read back) adopts the
    container. Returns the new daemon and the container's start (wall time, as Docker says it)."""
    d = Driver()
    fresh_boot(d)
    d.to_starting("c1")
    container_started = d.now
    d.advance(load_before_kill_s)
    assert d.records() == []  # no row yet: the daemon dies before ready
    d2 = Driver(now=d.now + 3)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=False))
    d2.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    d2.send(ContainerInfo("c1", container_started))
    assert d2.st() == State.STARTING
    return d2, container_started


def test_a_start_adopted_mid_load_records_its_row_timed_from_the_container_start() -> None:
    d, started = _daemon_killed_mid_load(40.0)
    d.advance(2)
    d.send(BAD_HEALTH)  # the server is not listening yet: still loading
    d.advance(25)
    d.send(LogKvPool(tokens=557_599, max_concurrency=8.5))
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=90.0, error=None))
    assert d.st() == State.RUNNING
    rows = d.records()
    assert len(rows) == 1
    assert rows[0].outcome == "ready"
    assert rows[0].container_id == "c1"
    assert rows[0].kv_tokens == 557_599
    assert rows[0].load_s == d.now - started  # the whole load, not only the part this daemon saw
    ready = [a for a in d.log if isinstance(a, Emit) and a.name == "start.ready"]
    assert ready[-1].fields["load_s"] == rows[0].load_s


def test_an_adopted_server_already_serving_records_nothing_new() -> None:
    d, _ = _daemon_killed_mid_load(40.0)
    d.advance(2)
    d.send(OK_HEALTH)  # answered at once: it was serving when this daemon came
    d.send(FirstGeneration(ok=True, latency_ms=90.0, error=None))
    assert d.st() == State.RUNNING
    assert d.records() == []


def test_an_adopted_load_without_docker_s_start_time_records_an_unknown_load_time() -> None:
    d = Driver()
    fresh_boot(d)
    d.to_starting("c1")
    d2 = Driver(now=d.now + 30)
    d2.s = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    d2.send(DaemonStarted(boot_changed=False))
    d2.send(ContainerObserved(container_id="c1", running=True, exit_code=None))
    d2.advance(2)
    d2.send(BAD_HEALTH)
    d2.send(LogReady())
    d2.send(OK_HEALTH)
    d2.send(FirstGeneration(ok=True, latency_ms=90.0, error=None))
    assert [(r.outcome, r.load_s) for r in d2.records()] == [("ready", None)]

"""Docker not answering -> answering: the pure health (threshold), the fleet step's alerts run through the
executor's fleet jobs (profile "supervisor"), a docker.down raised before a daemon restart resolved after it
(the health is persisted with the fleet state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from supervisor.adapters.store.state import Store
from supervisor.core.actions import Alert
from supervisor.core.clock import FakeClock
from supervisor.core.fleet.docker import DOCKER_ANSWERING, DOCKER_NOT_ANSWERING, DockerHealth
from supervisor.core.fleet.events import DockerPinged
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step
from supervisor.daemon.executor.fleet_jobs import FleetJobs
from supervisor.daemon.executor.records import Records
from supervisor.daemon.persist import restore_fleet

T0 = 1_790_000_000.0
DOWN = DockerPinged(False, "Error while fetching server API version: connection refused")
UP = DockerPinged(True)


def test_down_is_due_after_two_failed_pings_over_six_seconds() -> None:
    """One failed ping (an engine restart) is no news; two spanning >= 6 s are, once per outage."""
    h, flipped = DockerHealth().observe(False, T0, "refused")
    assert flipped
    assert (h.state, h.failed_pings, h.down_due(T0 + 30)) == (DOCKER_NOT_ANSWERING, 1, False)
    h, flipped = h.observe(False, T0 + 5, "refused")
    assert not flipped
    assert not h.down_due(T0 + 5)  # two pings, but only 5 s
    h, _ = h.observe(False, T0 + 10, "refused")
    assert h.down_due(T0 + 10)
    alert = h.down_alert(T0 + 10)
    assert (alert.kind, alert.severity, alert.title) == ("docker.down", "critical", "Docker not answering")
    assert alert.reason == "3 pings in a row failed over 10 s: refused"
    h2, _ = h.observe(True, T0 + 15)
    assert (h2.state, h2.since, h2.failed_pings, h2.alerted) == (DOCKER_ANSWERING, T0 + 15, 0, False)
    assert h2.to_dict() == {"state": "answering", "since": T0 + 15, "error": None, "failed_pings": 0}


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Alert, Any]] = []

    def __call__(self, profile: str, alert: Alert, diagnosis: str | None, details: Any) -> bool:
        self.sent.append((profile, alert, details))
        return True


def _pings(fleet: FleetState, pings: list[DockerPinged], clock: FakeClock, records: Records) -> FleetState:
    jobs = FleetJobs(records, background=None, post=None)  # type: ignore[arg-type]  # (no pool job here)
    for p in pings:
        clock.advance(5)
        fleet, actions = step(fleet, p, clock.now(), {}, FleetPolicy())
        for action in actions:
            jobs.run(action)
    return fleet


def test_daemon_alerts_down_once_and_up_once(tmp_path: Path, fake_clock: FakeClock) -> None:
    """Down for a while: one docker.down, one docker.up (with how long); a short blip: nothing."""
    sink = Sink()
    records = Records(Store(tmp_path, fake_clock), fake_clock, sink)
    h = _pings(FleetState(), [UP, DOWN, UP, UP], fake_clock, records)  # a 5 s blip
    assert sink.sent == []
    h = _pings(h, [DOWN] * 6 + [UP, UP], fake_clock, records)
    assert [(p, a.kind) for p, a, _ in sink.sent] == [
        ("supervisor", "docker.down"),
        ("supervisor", "docker.up"),
    ]
    # counted from the raised alert (10 s into the outage); daemon-wide: no container row
    assert sink.sent[1][2] == (("not answering for", "20 s"),)
    events = Store(tmp_path, fake_clock).read_events(None, 30)
    assert [e["name"] for e in events if e["name"].startswith("alert.")] == ["alert.raised", "alert.resolved"]
    assert {e["profile"] for e in events} == {""}  # daemon-wide, like docker.answering
    assert h.docker.state == DOCKER_ANSWERING


def test_down_before_a_daemon_restart_is_resolved_after_it(tmp_path: Path, fake_clock: FakeClock) -> None:
    """The next daemon's first answer resolves the docker.down the previous one raised."""
    sink = Sink()
    records = Records(Store(tmp_path, fake_clock), fake_clock, sink)
    fleet = _pings(FleetState(), [DOWN] * 3, fake_clock, records)
    fake_clock.advance(60)
    records = Records(Store(tmp_path, fake_clock), fake_clock, sink)  # a new daemon, the persisted state
    _pings(FleetState.from_dict(fleet.to_dict()), [UP, UP], fake_clock, records)
    assert [a.kind for _, a, _ in sink.sent] == ["docker.down", "docker.up"]
    # a daemon without a fleet.json (the first with the fleet step) knows it from the raised conditions
    _pings(FleetState(), [DOWN] * 3, fake_clock, records)
    records = Records(Store(tmp_path, fake_clock), fake_clock, sink)
    (tmp_path / "fleet.json").unlink(missing_ok=True)
    _pings(restore_fleet(Store(tmp_path, fake_clock), records), [UP], fake_clock, records)
    assert [a.kind for _, a, _ in sink.sent] == ["docker.down", "docker.up"] * 2
    sink.sent = sink.sent[:2]
    # and a plain daemon start with nothing raised sends nothing, records nothing
    fresh = Records(Store(tmp_path / "other", fake_clock), fake_clock, sink)
    _pings(FleetState(), [UP], fake_clock, fresh)
    assert len(sink.sent) == 2
    assert Store(tmp_path / "other", fake_clock).read_events(None, 10)[-1]["name"] == "docker.answering"

"""The fleet step, pure (plain values, a fake clock): kernel lines to every profile with whose they are,
companions due and their flips, Docker's flips, noted facts; the fleet snapshot through the real store
(a missing or corrupt file: a fresh state and one clear event, never a crash)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from supervisor.adapters.store.state import Store
from supervisor.core.clock import FakeClock
from supervisor.core.fleet.actions import CheckCompanion, Dispatch, Raise, Record
from supervisor.core.fleet.docker import DOCKER_NOT_ANSWERING
from supervisor.core.fleet.events import CompanionChecked, DiskSampled, DockerPinged, KernelLine, Noted, Tick
from supervisor.core.fleet.policy import Companion, FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step
from supervisor.core.host.attribution import PidLookup
from supervisor.core.host_events import KernelReport
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.daemon.executor.records import Records
from supervisor.daemon.persist import FleetWriter, restore_fleet

CID = "0123456789abcdef0123"
GW = Companion("p", "gw", "http://user:pw@127.0.0.1:9/health", interval_s=30.0, container="vllm-p")
POLICY = FleetPolicy(companions=(GW,))


def _profiles() -> dict[str, ProfileState]:
    a = replace(ProfileState.initial("a", 0.0, 3, 600.0), state=State.RUNNING, container_id=CID)
    b = replace(ProfileState.initial("b", 0.0, 3, 600.0), state=State.STOPPED)
    return {"a": a, "b": b}


def test_a_kernel_line_is_recorded_once_and_told_to_every_profile_with_whose_it_is() -> None:
    line = KernelLine(
        "xid", "Xid 31 (pid 42)", "NVRM: Xid 31", 5.0, {"xid": 31}, 42, True, PidLookup(True, CID)
    )
    fleet, actions = step(FleetState(), line, 10.0, _profiles(), POLICY)
    assert fleet == FleetState()
    fields = {"xid": 31, "whose": {"a": "ours", "b": "other"}, "backlog": False}
    assert actions[0] == Record("", "kernel.xid", fields)
    reports = {a.profile: a.event for a in actions if isinstance(a, Dispatch)}
    assert reports["a"] == KernelReport("xid", "Xid 31 (pid 42)", "NVRM: Xid 31", 5.0, "ours")
    assert isinstance(reports["b"], KernelReport)
    assert reports["b"].whose == "other"


def test_companions_are_checked_when_due_and_each_flip_alerts_once() -> None:
    clock = FakeClock(1000.0)
    fleet, actions = step(FleetState(), Tick(), clock.now(), {}, POLICY)
    assert [a for a in actions if isinstance(a, CheckCompanion)] == [CheckCompanion(GW)]
    fleet, actions = step(fleet, Tick(), clock.now() + 29, {}, POLICY)
    assert [a for a in actions if isinstance(a, CheckCompanion)] == []  # not due again before the interval
    fleet, actions = step(fleet, CompanionChecked("p", "gw", False, 503, "HTTP 503"), 1001.0, {}, POLICY)
    record, alert = actions
    assert isinstance(record, Record)
    assert record.name == "companion.failing"
    assert record.fields["url"] == "http://<secret>@127.0.0.1:9/health"  # userinfo masked
    assert isinstance(alert, Raise)
    assert (alert.alert.severity, alert.container) == ("warning", "vllm-p")
    fleet, actions = step(fleet, CompanionChecked("p", "gw", False, None, "timeout"), 1031.0, {}, POLICY)
    assert actions == []
    fleet, actions = step(fleet, CompanionChecked("p", "gw", True, 200), 1061.0, {}, POLICY)
    assert [a.name for a in actions if isinstance(a, Record)] == ["companion.recovered"]
    # an answer about a companion a reload removed is dropped
    assert step(fleet, CompanionChecked("p", "old", False, 500), 1062.0, {}, POLICY) == (fleet, [])


def test_docker_flips_are_recorded_and_noted_facts_only_recorded() -> None:
    fleet, actions = step(FleetState(), DockerPinged(False, "refused"), 1.0, {}, POLICY)
    assert fleet.docker.state == DOCKER_NOT_ANSWERING
    assert actions == [Record("", "docker.not_answering", {"error": "refused"})]
    fleet, actions = step(fleet, Noted("kernel_log.lost", {"records": 3}), 2.0, {}, POLICY)
    assert actions == [Record("", "kernel_log.lost", {"records": 3})]


def test_the_fleet_snapshot_round_trips_and_a_bad_file_gives_a_fresh_state(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    store = Store(tmp_path, clock)
    records = Records(store, clock)
    assert restore_fleet(store, records) == FleetState()  # no file: fresh, nothing recorded
    assert store.read_events(None, 10) == []
    fleet, _ = step(FleetState(), DockerPinged(False, "refused"), 1.0, {}, POLICY)
    fleet, _ = step(fleet, CompanionChecked("p", "gw", False, 503), 2.0, {}, POLICY)
    FleetWriter(store).write(fleet)
    back = restore_fleet(store, records)
    assert (back.docker, back.companions) == (fleet.docker, fleet.companions)
    for bad in (
        b"{not json",
        b'{"version": 1, "state_dir_low": "x"}',
        b'{"version": 1, "docker": {"nope": 1}}',
    ):
        (tmp_path / "fleet.json").write_bytes(bad)
        assert restore_fleet(store, records) == FleetState()
    events = store.read_events(None, 10)
    assert [e["name"] for e in events] == ["fleet.state_corrupt"] * 3
    assert "fleet.json" in events[0]["fields"]["error"]


def test_the_state_directory_low_on_space_warns_once_and_resolves_when_it_recovers() -> None:
    """host.state_dir_min_free_gib 5: 4.5 GiB free warns once, more samples below stay quiet, 6 GiB resolves;
    the raised flag is persisted (a restarted daemon resolves what the previous one raised); 0 = off."""
    policy = FleetPolicy(state_dir_min_free_gib=5.0)
    fleet, actions = step(FleetState(), DiskSampled(4.5), 1.0, {}, policy)
    assert fleet.state_dir_low
    assert fleet.host["state_dir_free_gib"] == 4.5
    record, raised = actions
    assert record == Record("supervisor", "state_dir.low", {"free_gib": 4.5, "min_free_gib": 5.0})
    assert isinstance(raised, Raise)
    assert (raised.alert.severity, raised.alert.kind, raised.alert.resolves) == (
        "warning",
        "state_dir.low",
        False,
    )
    assert "4.50 GiB free on the state directory, below 5 GiB" in raised.alert.reason
    fleet, actions = step(fleet, DiskSampled(4.0), 2.0, {}, policy)
    assert actions == []
    fleet = FleetState.from_dict(fleet.to_dict())  # a daemon restart in between
    fleet, actions = step(fleet, DiskSampled(6.0), 3.0, {}, policy)
    assert not fleet.state_dir_low
    assert [a.alert.kind for a in actions if isinstance(a, Raise)] == ["state_dir.ok"]
    assert all(a.alert.resolves for a in actions if isinstance(a, Raise))
    assert step(FleetState(), DiskSampled(0.1), 4.0, {}, FleetPolicy(state_dir_min_free_gib=0.0))[1] == []

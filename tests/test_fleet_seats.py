"""Seat rules across profiles (pure, plain values) and the loop's seat bookkeeping (no I/O)."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core import actions as A, events as E
from supervisor.core.fleet import seat_step
from supervisor.core.fleet.actions import FleetAction, Post, Record, Run
from supervisor.core.fleet.events import Claimed, Stepped
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.seats import SeatMember, seat_blockers, seat_handover, seat_pending
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from supervisor.core.vocab import Intent

RUN, STOP = Intent.RUN, Intent.STOP


def test_blockers_are_seat_mates_with_a_container_up_or_going() -> None:
    """Only members of the same seat in STARTING..STOPPING block; another seat or no seat never does."""
    for state in State:
        members = {
            "a": SeatMember("gpu0", State.PREFLIGHT, RUN),
            "b": SeatMember("gpu0", state, STOP),
            "c": SeatMember("gpu1", State.RUNNING, RUN),
            "d": SeatMember(None, State.RUNNING, RUN),
        }
        up = state in (State.STARTING, State.RUNNING, State.DEGRADED, State.DRAINING)
        up = up or state in (State.MAINTENANCE, State.STOPPING)
        assert seat_blockers("a", members) == (("b",) if up else ()), state
        assert seat_blockers("d", members) == ()
        assert seat_blockers("zz", members) == ()


def test_handover_targets_seat_mates_that_want_to_run() -> None:
    """A claim tells every seat-mate with intent run (not booting); never itself, another seat or none."""
    members = {
        "a": SeatMember("gpu0", State.PREFLIGHT, RUN),
        "b": SeatMember("gpu0", State.RUNNING, RUN),
        "b2": SeatMember("gpu0", State.BACKOFF, RUN),
        "b3": SeatMember("gpu0", State.STOPPING, STOP),
        "b4": SeatMember("gpu0", State.RUNNING, RUN, booting=True),
        "c": SeatMember("gpu1", State.RUNNING, RUN),
        "d": SeatMember(None, State.RUNNING, RUN),
    }
    assert seat_handover("a", members) == ("b", "b2")
    assert seat_pending("a", members)  # b4 is told once it has been looked at
    assert not seat_pending("a", {**members, "b4": replace(members["b4"], booting=False)})
    assert seat_handover("d", members) == ()
    assert seat_handover("c", members) == ()


def _fleet(
    seats: dict[str, str | None], **kw: tuple[State, Intent]
) -> tuple[FleetPolicy, dict[str, ProfileState]]:
    """The fleet policy of these seats and the profiles' snapshots (state, intent)."""
    profiles = {n: replace(ProfileState.initial(n, 0.0), state=s, intent=i) for n, (s, i) in kw.items()}
    return FleetPolicy(seats=tuple(seats.items())), profiles


def _stepped(
    fleet: FleetState,
    name: str,
    event: E.Event,
    *actions: A.Action,
    policy: FleetPolicy,
    profiles: dict[str, ProfileState],
) -> tuple[FleetState, list[FleetAction]]:
    """The fleet step after ``name``'s machine stepped on ``event`` asking for ``actions``."""
    return step(fleet, Stepped(name, event, actions), 0.0, profiles, policy)


def test_the_fleet_holds_a_preflight_until_the_seat_is_free() -> None:
    """A start's preflight waits while a seat-mate is up and runs once it is STOPPED; the slot is guarded."""
    policy, profiles = _fleet(
        {"a": "gpu0", "b": "gpu0", "c": None},
        a=(State.PREFLIGHT, RUN),
        b=(State.DRAINING, STOP),
        c=(State.PREFLIGHT, RUN),
    )
    fleet, out = _stepped(FleetState(), "a", E.Tick(), A.RunPreflight(), policy=policy, profiles=profiles)
    assert out == [Record("a", "seat.waiting", {"for": ["b"]})]
    fleet, out = _stepped(
        fleet, "a", E.Tick(), A.AcquireSlot(), A.ProbeHealth(), policy=policy, profiles=profiles
    )
    assert out == [Run("a", A.ProbeHealth())]
    fleet, out = _stepped(fleet, "c", E.Tick(), A.RunPreflight(), policy=policy, profiles=profiles)
    assert out == [Run("c", A.RunPreflight())]
    assert seat_step.status(fleet, profiles, policy)["a"] == {"name": "gpu0", "waiting_for": ["b"]}
    assert "c" not in seat_step.status(fleet, profiles, policy)
    fleet, out2 = seat_step.released(fleet, profiles, policy)
    assert out2 == []
    profiles["b"] = replace(profiles["b"], state=State.STOPPED)
    fleet, out2 = seat_step.released(fleet, profiles, policy)
    assert out2 == [Run("a", A.RunPreflight())]
    assert seat_step.released(fleet, profiles, policy)[1] == []  # once
    assert seat_step.status(fleet, profiles, policy)["a"] == {"name": "gpu0", "waiting_for": []}


def test_the_fleet_drops_a_held_preflight_of_a_start_that_ended() -> None:
    """A held preflight is forgotten when its profile left that start (stopped, or a newer attempt)."""
    policy, profiles = _fleet({"a": "gpu0", "b": "gpu0"}, a=(State.PREFLIGHT, RUN), b=(State.RUNNING, RUN))
    fleet, _ = _stepped(FleetState(), "a", E.Tick(), A.RunPreflight(), policy=policy, profiles=profiles)
    profiles["a"] = replace(profiles["a"], state=State.STOPPED)
    profiles["b"] = replace(profiles["b"], state=State.STOPPED)
    fleet, out = seat_step.released(fleet, profiles, policy)
    assert (out, dict(fleet.held)) == ([], {})


def test_operator_starts_claim_and_each_handover_is_posted_once() -> None:
    """An operator start heading for RUNNING claims; its seat-mates get one HandoverRequested each."""
    policy, profiles = _fleet(
        {"a": "gpu0", "b": "gpu0", "c": None},
        a=(State.PREFLIGHT, RUN),
        b=(State.RUNNING, RUN),
        c=(State.PREFLIGHT, RUN),
    )
    fleet, out = _stepped(FleetState(), "a", E.StopRequested(), policy=policy, profiles=profiles)
    fleet, out2 = _stepped(
        fleet, "c", E.StartRequested(), policy=policy, profiles=profiles
    )  # no seat: no claim
    refused = {**profiles, "a": replace(profiles["a"], state=State.FATAL)}
    fleet, out3 = _stepped(fleet, "a", E.StartRequested(), policy=policy, profiles=refused)
    assert out + out2 + out3 == []
    fleet, out = _stepped(fleet, "a", E.StartRequested(), policy=policy, profiles=profiles)
    fleet, out2 = _stepped(fleet, "a", E.Tick(), policy=policy, profiles=profiles)
    assert out + out2 == [Post("b", E.HandoverRequested("a"))]


def test_an_autostart_claim_waits_for_a_booting_seat_mate() -> None:
    """An autostart claim stays open while a seat-mate has not been looked at, then hands it over."""
    policy, profiles = _fleet({"a": "gpu0", "b": "gpu0"}, a=(State.PREFLIGHT, RUN), b=(State.RUNNING, RUN))
    profiles["b"] = replace(profiles["b"], booting=True)
    fleet, out = step(FleetState(), Claimed("a"), 0.0, profiles, policy)
    fleet, out = _stepped(fleet, "a", E.Tick(), policy=policy, profiles=profiles)
    assert out == []
    profiles["b"] = replace(profiles["b"], booting=False, state=State.STARTING, adopted=True)
    fleet, out = _stepped(fleet, "a", E.Tick(), policy=policy, profiles=profiles)
    assert out == [Post("b", E.HandoverRequested("a"))]
    assert _stepped(fleet, "a", E.Tick(), policy=policy, profiles=profiles)[1] == []


def test_status_table_shows_seats_waits_and_the_last_known_good() -> None:
    """`supervisorctl status`: a line per shared seat naming who waits for whom, LKG after the state."""
    from supervisor.cli.render import render_status

    doc = {
        "daemon": {"pid": 1, "version": "x", "uptime_s": 5},
        "profiles": [
            {"name": "a", "state": "DRAINING", "seat": {"name": "gpu0", "waiting_for": []}},
            {"name": "b", "state": "PREFLIGHT", "seat": {"name": "gpu0", "waiting_for": ["a"]}},
            {"name": "c", "state": "RUNNING", "seat": {"name": None, "waiting_for": []}},
            {"name": "d", "state": "RUNNING", "running_spec": "last_known_good"},
        ],
    }
    text = render_status(doc, 10.0)
    assert "\nseat gpu0: a, b (b waits for a)" in text
    assert "RUNNING LKG" in text
    assert "LKG = serving the last known good spec" in text
    assert "seat None" not in text

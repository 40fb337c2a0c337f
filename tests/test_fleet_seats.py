"""Seat rules across profiles (pure, plain values) and the loop's seat bookkeeping (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from supervisor.config import Profile
from supervisor.core import actions as A, events as E
from supervisor.core.fleet.seats import SeatMember, seat_blockers, seat_handover, seat_pending
from supervisor.core.profile_state import ProfileState
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.states import State
from supervisor.core.vocab import Intent
from supervisor.daemon.duties.seats import SeatKeeper

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


def _profile(name: str, seat: str | None) -> Profile:
    return Profile(name=name, source=Path(f"{name}.yaml"), container=ContainerSpec(name, "img"), seat=seat)


@dataclass
class _Slot:
    """One profile as the loop holds it (``state`` is its current snapshot)."""

    state: ProfileState


@dataclass
class _Calls:
    """What the keeper asked of the loop: actions run, events recorded, events posted (plain lists)."""

    ran: list[tuple[str, A.Action]] = field(default_factory=list)
    emitted: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)
    posted: list[tuple[str, E.Event]] = field(default_factory=list)

    @property
    def records(self) -> _Calls:
        return self

    def run(self, name: str, action: A.Action, reply: None) -> None:
        self.ran.append((name, action))

    def emit(self, profile: str, name: str, fields: dict[str, object]) -> None:
        self.emitted.append((profile, name, fields))

    def post(self, profile: str, event: E.Event) -> None:
        self.posted.append((profile, event))


def _keeper(
    seats: dict[str, str | None], **kw: tuple[State, Intent]
) -> tuple[SeatKeeper, dict[str, _Slot], _Calls]:
    live = {n: _Slot(replace(ProfileState.initial(n, 0.0), state=s, intent=i)) for n, (s, i) in kw.items()}
    calls = _Calls()
    keeper = SeatKeeper([_profile(n, seat) for n, seat in seats.items()], lambda: live, calls, calls.post)
    return keeper, live, calls


def _set(live: dict[str, _Slot], name: str, **changes: object) -> None:
    live[name].state = replace(live[name].state, **changes)  # type: ignore[arg-type]


def test_keeper_holds_a_preflight_until_the_seat_is_free() -> None:
    """A start's preflight waits while a seat-mate is up and runs once it is STOPPED; the slot is guarded."""
    keeper, live, calls = _keeper(
        {"a": "gpu0", "b": "gpu0", "c": None},
        a=(State.PREFLIGHT, RUN),
        b=(State.DRAINING, STOP),
        c=(State.PREFLIGHT, RUN),
    )
    assert keeper.hold("a", A.RunPreflight())
    assert calls.emitted == [("a", "seat.waiting", {"for": ["b"]})]
    assert keeper.hold("a", A.AcquireSlot())
    assert not keeper.hold("a", A.ProbeHealth())
    assert not keeper.hold("c", A.RunPreflight())
    assert keeper.status()["a"] == {"name": "gpu0", "waiting_for": ["b"]}
    assert "c" not in keeper.status()
    keeper.tick()
    assert calls.ran == []
    _set(live, "b", state=State.STOPPED)
    keeper.tick()
    keeper.tick()
    assert calls.ran == [("a", A.RunPreflight())]  # once
    assert keeper.status()["a"] == {"name": "gpu0", "waiting_for": []}


def test_keeper_drops_a_held_preflight_of_a_start_that_ended() -> None:
    """A held preflight is forgotten when its profile left that start (stopped, or a newer attempt)."""
    keeper, live, calls = _keeper(
        {"a": "gpu0", "b": "gpu0"}, a=(State.PREFLIGHT, RUN), b=(State.RUNNING, RUN)
    )
    keeper.hold("a", A.RunPreflight())
    _set(live, "a", state=State.STOPPED)
    _set(live, "b", state=State.STOPPED)
    keeper.tick()
    assert calls.ran == []


def test_keeper_claims_from_operator_starts_and_posts_each_handover_once() -> None:
    """An operator start heading for RUNNING claims; its seat-mates get one HandoverRequested each."""
    keeper, live, calls = _keeper(
        {"a": "gpu0", "b": "gpu0", "c": None},
        a=(State.PREFLIGHT, RUN),
        b=(State.RUNNING, RUN),
        c=(State.PREFLIGHT, RUN),
    )
    keeper.after_step("a", E.StopRequested(), live["a"].state)
    keeper.after_step("c", E.StartRequested(), live["c"].state)  # no seat: no claim
    keeper.after_step("a", E.StartRequested(), replace(live["a"].state, state=State.FATAL))  # refused
    assert calls.posted == []
    keeper.after_step("a", E.StartRequested(), live["a"].state)
    keeper.after_step("a", E.Tick(), live["a"].state)
    assert calls.posted == [("b", E.HandoverRequested("a"))]


def test_keeper_autostart_claim_waits_for_a_booting_seat_mate() -> None:
    """An autostart claim stays open while a seat-mate has not been looked at, then hands it over."""
    keeper, live, _calls = _keeper(
        {"a": "gpu0", "b": "gpu0"}, a=(State.PREFLIGHT, RUN), b=(State.RUNNING, RUN)
    )
    _set(live, "b", booting=True)
    keeper.claim("a")
    assert keeper.handovers() == []
    _set(live, "b", booting=False, state=State.STARTING, adopted=True)
    assert keeper.handovers() == [("b", "a")]
    assert keeper.handovers() == []


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

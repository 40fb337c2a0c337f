"""The fleet side of scheduled maintenance (pure): events, alerts, hold while starting, one at a time."""

from __future__ import annotations

import json

import pytest

from supervisor.core.actions import Action, Alert, Emit
from supervisor.core.errors import StateError
from supervisor.core.maintenance.duty import (
    SETTLE_MAX_S,
    MaintenanceDuty,
    MaintenanceOrders,
    resume,
)
from supervisor.core.maintenance.plan import CatchUp
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State

T0 = 1_790_000_000.0
DUE = CatchUp(run=T0)
NOTHING = CatchUp()


def describe(ts: float) -> str:
    return f"T{ts - T0:+.0f}"


def fleet(**states: State) -> dict[str, ProfileState]:
    return {n: ProfileState(name=n, state=s) for n, s in states.items()}


def emits(orders: MaintenanceOrders) -> list[tuple[str, str]]:
    return [(p, a.name) for p, a in orders.records if isinstance(a, Emit)]


def alerts(orders: MaintenanceOrders) -> list[tuple[str, Alert]]:
    return [(p, a) for p, a in orders.records if isinstance(a, Alert)]


def field_of(orders: MaintenanceOrders, name: str) -> dict[str, object]:
    found: list[Action] = [a for _, a in orders.records if isinstance(a, Emit) and a.name == name]
    assert len(found) == 1, orders
    assert isinstance(found[0], Emit)
    return found[0].fields


def test_two_profiles_are_maintained_one_after_the_other() -> None:
    """a first; b only once a is RUNNING again after having left; then the round completes."""
    duty, o = MaintenanceDuty().step(T0, fleet(a=State.RUNNING, b=State.RUNNING), DUE, describe)
    assert o.requests == ("a",)
    assert ("", "maintenance.due") in emits(o)
    assert ("a", "maintenance.turn") in emits(o)
    # the request took a to MAINTENANCE; b waits through a's whole restart
    for st in (State.MAINTENANCE, State.STOPPING, State.PREFLIGHT, State.STARTING):
        duty, o = duty.step(T0 + 5, fleet(a=st, b=State.RUNNING), NOTHING, describe)
        assert o.requests == ()
    duty, o = duty.step(T0 + 60, fleet(a=State.RUNNING, b=State.RUNNING), NOTHING, describe)
    assert o.requests == ("b",)
    duty, o = duty.step(T0 + 61, fleet(a=State.RUNNING, b=State.MAINTENANCE), NOTHING, describe)
    duty, o = duty.step(T0 + 90, fleet(a=State.RUNNING, b=State.RUNNING), NOTHING, describe)
    summary = field_of(o, "maintenance.round_completed")
    assert summary["done"] == ("a", "b")
    assert summary["failed"] == ()
    assert summary["skipped"] == ()
    assert duty == MaintenanceDuty()


def test_a_profile_not_serving_is_skipped_with_an_event_and_a_warning_alert() -> None:
    """A STOPPED profile at its turn: maintenance.skipped and a warning alert; the next one starts."""
    _, o = MaintenanceDuty().step(T0, fleet(a=State.STOPPED, b=State.RUNNING), DUE, describe)
    assert ("a", "maintenance.skipped") in emits(o)
    assert field_of(o, "maintenance.skipped") == {"state": "STOPPED", "fire_local": "T+0"}
    [(who, alert)] = alerts(o)
    assert who == "a"
    assert alert.severity == "warning"
    assert alert.title == "maintenance skipped: not serving"
    assert o.requests == ("b",)


def test_a_failed_restart_lets_the_next_profile_go() -> None:
    """a ends in BACKOFF (the machine alerted critical): b is maintained anyway."""
    duty, _ = MaintenanceDuty().step(T0, fleet(a=State.RUNNING, b=State.RUNNING), DUE, describe)
    duty, _ = duty.step(T0 + 1, fleet(a=State.MAINTENANCE, b=State.RUNNING), NOTHING, describe)
    duty, o = duty.step(T0 + 2, fleet(a=State.BACKOFF, b=State.RUNNING), NOTHING, describe)
    assert o.requests == ("b",)
    assert duty.round.failed == ("a",)


def test_a_due_round_waits_while_a_profile_is_starting() -> None:
    """At daemon start the profiles are being adopted: the round is held, then runs when they serve."""
    starting = fleet(a=State.STARTING, b=State.RUNNING)
    duty, o = MaintenanceDuty().step(T0, starting, DUE, describe)
    assert o.requests == ()
    assert duty.busy
    assert ("", "maintenance.due") in emits(o)
    duty, o = duty.step(T0 + 30, starting, NOTHING, describe)
    assert o.requests == ()
    booting = {"a": ProfileState(name="a", state=State.RUNNING, booting=True), **fleet(b=State.RUNNING)}
    duty, o = duty.step(T0 + 31, booting, NOTHING, describe)
    assert o.requests == ()
    duty, o = duty.step(T0 + 40, fleet(a=State.RUNNING, b=State.RUNNING), NOTHING, describe)
    assert o.requests == ("a",)


def test_the_hold_is_bounded() -> None:
    """A profile that never finishes starting does not block the round forever: it is skipped."""
    starting = fleet(a=State.STARTING, b=State.RUNNING)
    duty, _ = MaintenanceDuty().step(T0, starting, DUE, describe)
    duty, o = duty.step(T0 + SETTLE_MAX_S - 1, starting, NOTHING, describe)
    assert o.requests == ()
    duty, o = duty.step(T0 + SETTLE_MAX_S, starting, NOTHING, describe)
    assert ("a", "maintenance.skipped") in emits(o)
    assert o.requests == ("b",)


def test_missed_fires_are_daemon_events_and_a_fire_during_a_round_is_ignored() -> None:
    """maintenance.missed per dropped fire (profile ''); a new fire while busy: maintenance.ignored."""
    plan = CatchUp(missed=(T0 - 86400, T0 - 3600))
    duty, o = MaintenanceDuty().step(T0, fleet(a=State.RUNNING), plan, describe)
    assert emits(o) == [("", "maintenance.missed"), ("", "maintenance.missed")]
    alerts = [(n, a) for n, a in o.records if isinstance(a, Alert)]
    assert [(n, a.kind, a.severity, a.condition) for n, a in alerts] == [
        ("a", "maintenance.missed", "warning", "maintenance")
    ]  # one warning per profile for the newest missed fire; the next round's end resolves it
    assert o.requests == ()
    assert not duty.busy
    late = [a.fields["late_s"] for _, a in o.records if isinstance(a, Emit)]
    assert late == [86400, 3600]
    duty, _ = duty.step(T0, fleet(a=State.RUNNING), DUE, describe)
    duty, _ = duty.step(T0 + 1, fleet(a=State.MAINTENANCE), NOTHING, describe)
    duty2, o = duty.step(T0 + 60, fleet(a=State.MAINTENANCE), CatchUp(run=T0 + 60), describe)
    assert emits(o) == [("", "maintenance.ignored")]
    assert duty2 == duty


def test_the_duty_survives_json_and_a_daemon_restart() -> None:
    """to_dict/from_dict round trip; resume goes on within catch_up_s and abandons an older round."""
    duty, _ = MaintenanceDuty().step(T0, fleet(a=State.RUNNING, b=State.RUNNING), DUE, describe)
    duty, _ = duty.step(T0 + 1, fleet(a=State.MAINTENANCE, b=State.RUNNING), NOTHING, describe)
    back = MaintenanceDuty.from_dict(json.loads(json.dumps(duty.to_dict())))
    assert back == duty
    again, o = resume(back, T0 + 600, 21600, describe)
    assert again.round == duty.round
    assert emits(o) == [("", "maintenance.resumed")]
    # a is adopted (STARTING), then RUNNING: it counts as done, b goes next
    again, o = again.step(T0 + 601, fleet(a=State.STARTING, b=State.RUNNING), NOTHING, describe)
    again, o = again.step(T0 + 610, fleet(a=State.RUNNING, b=State.RUNNING), NOTHING, describe)
    assert o.requests == ("b",)
    assert again.round.done == ("a",)
    gone, o = resume(back, T0 + 21600 + 61, 21600, describe)
    assert gone == MaintenanceDuty()
    assert field_of(o, "maintenance.abandoned")["not_reached"] == ("a", "b")


def test_a_held_round_resumes_with_a_fresh_hold() -> None:
    """A round held when the daemon stopped is held again from the restart (profiles being adopted)."""
    held = MaintenanceDuty(fire=T0, held_since=T0)
    again, _ = resume(held, T0 + SETTLE_MAX_S + 5, 86400, describe)
    assert again.held_since == T0 + SETTLE_MAX_S + 5


@pytest.mark.parametrize(
    "bad",
    [[], {"fire": "x"}, {"round": []}, {"round": {"queue": "ab"}}, {"round": {"active": 1}}],
)
def test_a_corrupt_duty_is_a_state_error(bad: object) -> None:
    """Wrong shapes in maintenance.json raise StateError (the clock then starts clean)."""
    with pytest.raises(StateError):
        MaintenanceDuty.from_dict(bad)

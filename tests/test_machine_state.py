"""ProfileState persistence and status shape."""

from __future__ import annotations

import json

import pytest

from supervisor.core.errors import StateError
from supervisor.core.events import LogProgress
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot


def test_round_trip_of_a_running_profile() -> None:
    """A RUNNING snapshot survives JSON persistence unchanged."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    s = d.s
    assert ProfileState.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_from_dict_tolerates_missing_keys() -> None:
    """An old file with only a few keys loads with defaults."""
    s = ProfileState.from_dict({"name": "p", "state": "BACKOFF", "load": {"pct": 3}})
    assert s.state == State.BACKOFF
    assert s.load.pct == 3.0
    assert s.intent == "run"
    assert s.breaker.failures == ()


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "p", "state": "NAPPING"},
        {"name": "p", "restarts": "3"},
        {"name": "p", "adopted": 1},
        {"name": "p", "container_id": 5},
        {"name": "p", "intent": "maybe"},
        {"name": "p", "load": {"markers_seen": [1]}},
        {"name": "p", "last_probe": []},
        {"name": "p", "since": None},
        {"state": "RUNNING"},
        [],
    ],
)
def test_from_dict_rejects_bad_types(bad: object) -> None:
    """Wrong types raise StateError naming the field."""
    with pytest.raises(StateError):
        ProfileState.from_dict(bad)


def test_status_dict_has_design_keys() -> None:
    """status_dict carries the docs/contract.md per-profile keys with the right shapes."""
    d = Driver()
    fresh_boot(d)
    d.to_starting()
    d.send(LogProgress(pct=45.0, phase="weights"))
    st = d.s.status_dict(d.now)
    assert st["state"] == "STARTING"
    assert st["load_progress"]["pct"] == 45.0
    assert st["container_id"] == "c1"
    assert st["breaker"] == {"state": "closed", "emergencies": 0, "window_s": 7200.0, "limit": 3}
    assert set(st["last_probe"]) == {"ok", "latency_ms", "at"}
    json.dumps(st)

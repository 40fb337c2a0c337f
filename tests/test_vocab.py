"""The vocabulary as enums: persisted as the same strings, read back as members, unknown values tolerated."""

from __future__ import annotations

import json

import pytest

from supervisor.core.errors import StateError
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import FAILED_STATES, TRANSIT_STATES, State
from supervisor.core.vocab import Intent, Pending


def test_snapshots_persist_the_plain_strings_and_read_back_members() -> None:
    s = ProfileState(name="p", state=State.STOPPING, intent=Intent.STOP, pending=Pending.FAILED_START)
    text = json.dumps(s.to_dict())
    data = json.loads(text)
    assert (data["intent"], data["pending"]) == ("stop", "failed_start")
    back = ProfileState.from_dict(data)
    assert back == s
    assert back.intent is Intent.STOP
    assert back.pending is Pending.FAILED_START


def test_an_unknown_persisted_pending_reads_as_none() -> None:
    """A pending a newer version wrote: the stop completes by intent instead of the state being lost."""
    data = ProfileState(name="p", state=State.STOPPING).to_dict() | {"pending": "teleport"}
    assert ProfileState.from_dict(data).pending is None
    assert ProfileState.from_dict(data | {"pending": 7}).pending is None


def test_an_unknown_persisted_intent_is_a_state_error_not_a_crash() -> None:
    data = ProfileState(name="p").to_dict() | {"intent": "pause"}
    with pytest.raises(StateError, match="intent must be 'run' or 'stop'"):
        ProfileState.from_dict(data)


def test_members_compare_equal_to_the_status_document_strings() -> None:
    """The CLI reads the JSON status document (plain strings) and tests it against the core's groups."""
    assert "BACKOFF" in FAILED_STATES
    assert {"PREFLIGHT", "WAITING", "STARTING", "DRAINING", "STOPPING", "MAINTENANCE"} == TRANSIT_STATES
    assert "RUNNING" not in TRANSIT_STATES
    assert f"{Pending.REDRAW}_overdue" == "redraw_overdue"

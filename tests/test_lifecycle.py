"""The daemon's own life, pure: the alive record, the verdict on the previous run, and the texts of the
start, stop and crash messages (plain values, a fixed clock)."""

from __future__ import annotations

import dataclasses

import pytest

from supervisor.core.alerts.catalog import MESSAGES
from supervisor.core.alerts.message import iso_local
from supervisor.core.breaker import Breaker
from supervisor.core.errors import StateError
from supervisor.core.fleet.lifecycle import (
    SUPERVISOR,
    AliveRecord,
    crashed_alert,
    previous_run,
    start_line,
    started_alert,
    stopped_alert,
)
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State

NOW = 1_790_000_000.0


def _state(name: str, **kw: object) -> ProfileState:
    return dataclasses.replace(ProfileState.initial(name, NOW - 600), **kw)  # type: ignore[arg-type]


def test_alive_record_round_trips_and_rejects_wrong_types() -> None:
    rec = AliveRecord(12, NOW - 100, NOW, "boot-a", clean_stop=True, version="0.1.0")
    assert AliveRecord.from_dict(rec.to_dict()) == rec
    for bad in (
        {"pid": 1, "started_at": "x", "last_alive": NOW},
        {"pid": 1, "started_at": 1, "last_alive": True},
    ):
        with pytest.raises(StateError):
            AliveRecord.from_dict(bad)
    with pytest.raises(StateError, match="clean_stop"):
        AliveRecord.from_dict({"pid": 1, "started_at": 1, "last_alive": 2, "clean_stop": "yes"})


def test_no_record_claims_nothing() -> None:
    """A first start (or a corrupt record, which the daemon reads as none): no previous run."""
    assert previous_run(None, NOW, "boot-a", NOW - 10) is None


def test_a_clean_stop_is_not_a_crash() -> None:
    prev = AliveRecord(12, NOW - 7200, NOW - 300, "boot-a", clean_stop=True)
    p = previous_run(prev, NOW, "boot-a", NOW - 86400)
    assert p is not None
    assert (p.crashed, p.rebooted, p.down_s, p.booted_at) == (False, False, 300.0, None)
    alert = started_alert({}, NOW, version="0.1.0", pid=99, previous=p)
    assert f"stopped cleanly at {iso_local(NOW - 300)}, for 5 min" in alert.reason


def test_a_missing_clean_stop_is_a_crash_dated_from_the_last_sign_of_life() -> None:
    prev = AliveRecord(12, NOW - 7200, NOW - 754, "boot-a")
    p = previous_run(prev, NOW, "boot-a", NOW - 86400)
    assert p is not None
    assert p.crashed
    assert not p.rebooted
    alert = crashed_alert(p)
    assert alert.kind == "daemon.crashed"
    assert alert.severity == "warning"
    assert alert.reason.startswith(
        f"the supervisor was down from {iso_local(NOW - 754)} to {iso_local(NOW)} (12 min)"
    )
    assert "rebooted" not in alert.reason
    params = dict(alert.params)
    assert params["down_for"] == "12 min"
    # every placeholder of the catalogue's texts is filled by the alert's params
    entry = MESSAGES["daemon.crashed"]
    for text in (entry.title.en, entry.title.zh, entry.todo.en, entry.todo.zh):
        text.format(**params)


def test_a_crash_across_a_reboot_is_critical_and_says_when_the_host_booted() -> None:
    prev = AliveRecord(12, NOW - 7200, NOW - 3600, "boot-a", exit_error=None)
    p = previous_run(prev, NOW, "boot-b", NOW - 1200)
    assert p is not None
    assert p.crashed
    assert p.rebooted
    assert p.booted_at == NOW - 1200
    alert = crashed_alert(p)
    assert alert.severity == "critical"
    assert f"the host was rebooted in between (up since {iso_local(NOW - 1200)})" in alert.reason


def test_an_error_exit_is_a_crash_that_names_the_error() -> None:
    prev = AliveRecord(12, NOW - 7200, NOW - 60, "boot-a", exit_error="RuntimeError: boom")
    p = previous_run(prev, NOW, "boot-a", None)
    assert p is not None
    assert p.crashed
    assert "it ended on an internal error: RuntimeError: boom" in crashed_alert(p).reason


def test_start_lines_say_what_was_found_per_profile() -> None:
    tripped = Breaker(limit=3, window_s=7200, failures=(NOW - 60, NOW - 30, NOW - 10), tripped_at=NOW - 10)
    states = {
        "qwen": _state(
            "qwen",
            state=State.STARTING,
            adopted=True,
            container_id="abcdef0123456789",
            container_started_at=NOW - 3 * 86400,
        ),
        "gemma": _state("gemma", state=State.PREFLIGHT),
        "old": _state("old", state=State.STOPPED, intent="stop"),
        "bad": _state("bad", state=State.FATAL, breaker=tripped),
        "blind": _state("blind", state=State.RUNNING, booting=True),
    }
    assert start_line(states["qwen"], NOW) == (
        "adopted",
        f"adopted container abcdef012345, running since {iso_local(NOW - 3 * 86400)} (up 3 d)",
    )
    assert start_line(states["gemma"], NOW) == ("starting", "starting (PREFLIGHT)")
    assert start_line(states["old"], NOW) == ("stopped", "stopped (manual stop persisted)")
    assert start_line(states["bad"], NOW) == (
        "fatal",
        "FATAL: circuit breaker open (3/3); supervisorctl reset bad once fixed",
    )
    assert start_line(states["blind"], NOW)[0] == "unknown"
    alert = started_alert(states, NOW, version="0.1.0", pid=4242, previous=None)
    assert (alert.kind, alert.severity) == ("daemon.started", "info")
    assert alert.reason == (
        "vllm-supervisor 0.1.0 (pid 4242): 1 adopted, 1 starting, 1 stopped, 1 fatal, 1 unknown; "
        "first start with this state directory"
    )
    assert [name for name, _ in alert.details] == list(states)
    entry = MESSAGES["daemon.started"]
    entry.title.en.format(**dict(alert.params))
    entry.title.zh.format(**dict(alert.params))


def test_the_stop_message_says_the_servers_keep_running() -> None:
    states = {"qwen": _state("qwen", state=State.RUNNING, container_id="abcdef0123456789")}
    alert = stopped_alert(states, 5 * 3600, version="0.1.0", pid=7)
    assert alert.kind == "daemon.stopped"
    assert alert.title == "supervisor stopping; the model servers keep running"
    assert "stopping after 5 h" in alert.reason
    assert alert.details == (("qwen", "RUNNING, container abcdef012345 left running"),)
    assert SUPERVISOR == "supervisor"

"""``status`` in a daemon's first moments: a configured profile is always listed (``READING`` until its
record is read), never an empty table (issue 38: the demo died with IndexError on a new machine).

One real daemon process, asked for status as fast as the socket answers from the moment it is spawned.
The profile has ``autostart: false``: no container is started, only Docker is asked about it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from supervisor.cli.common import EXIT_NOT_ALL_RUNNING, status_exit_code
from supervisor.cli.render import render_status
from supervisor.config import load_config
from supervisor.core.errors import ControlError
from supervisor.core.fleet.docker import DockerHealth
from supervisor.daemon.status import READING, status_document
from tests.daemon_harness import DaemonProc, ProfileSpec, write_daemon_config, write_profile
from tests.harness import GiveUp, wait_for

NOW = 1_700_000_000.0


def _config(tmp_path: Path) -> Path:
    test_id = uuid.uuid4().hex[:8]
    spec = ProfileSpec("first", f"vsup-test-first-{test_id}", extra={"autostart": False})
    return write_daemon_config(tmp_path, [write_profile(tmp_path, spec, test_id)])


def test_a_profile_without_a_state_yet_is_listed_as_reading(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    doc = status_document(
        config, {}, now=NOW, uptime_s=0.0, docker=DockerHealth(), maintenance={}, slot_holder=None
    )
    [p] = doc["profiles"]
    assert (p["name"], p["state"], p["observed"], p["since"]) == ("first", READING, False, None)
    assert p["container"] == config.profiles[0].container.name
    assert status_exit_code(doc["profiles"]) == EXIT_NOT_ALL_RUNNING
    text = render_status(doc, NOW)
    assert "READING" in text
    assert "READING?" not in text
    assert "(no profiles)" not in text


@pytest.mark.docker
def test_a_daemon_asked_at_once_never_answers_without_its_profile(tmp_path: Path) -> None:
    d = DaemonProc(_config(tmp_path), tmp_path)
    answers: list[list[str]] = []
    states: list[str] = []

    def observed() -> bool:
        if d.proc is not None and d.proc.poll() is not None:
            raise GiveUp(f"daemon exited with {d.proc.returncode}:\n{d.log_tail()}")
        try:
            reply = d.call("status")
        except ControlError:
            return False  # the socket is not bound yet
        assert reply.get("ok"), reply
        profiles = reply["data"]["profiles"]
        answers.append([p["name"] for p in profiles])
        states.extend(p["state"] for p in profiles)
        return bool(profiles) and profiles[0].get("observed") is True

    try:
        d.start(wait=False)
        wait_for(observed, 30, interval=0.0, message="the profile looked at")
    finally:
        d.close()
    assert answers, "the daemon never answered"
    assert all(names == ["first"] for names in answers), answers
    assert states[-1] == "STOPPED"

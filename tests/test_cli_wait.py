"""The pure decisions of `start|restart --wait`: which status ends the wait, and the default timeout."""

from __future__ import annotations

from supervisor.cli.wait import Baseline, default_timeout, progress_line, verdict

RUNNING_BEFORE = Baseline(start_attempts=4, state="RUNNING")


def test_restart_needs_a_new_attempt() -> None:
    """The old RUNNING (same counter, e.g. a document published before the command) is not the answer."""
    assert verdict("restart", RUNNING_BEFORE, False, {"state": "RUNNING", "start_attempts": 4}) is None
    assert verdict("restart", RUNNING_BEFORE, True, {"state": "DRAINING", "start_attempts": 4}) is None
    assert verdict("restart", RUNNING_BEFORE, True, {"state": "RUNNING", "start_attempts": 5}) == "running"


def test_failures_count_only_once_this_start_is_under_way() -> None:
    """A stale BACKOFF before the command is no failure; after a new attempt or a state on the way it is."""
    base = Baseline(start_attempts=2, state="BACKOFF")
    assert verdict("start", base, False, {"state": "BACKOFF", "start_attempts": 2}) is None
    assert verdict("start", base, False, {"state": "BACKOFF", "start_attempts": 3}) == "failed"
    assert verdict("start", base, True, {"state": "FATAL", "start_attempts": 2}) == "failed"
    assert (
        verdict("start", base, True, {"state": "STOPPED", "intent": "stop", "start_attempts": 3}) == "failed"
    )
    assert verdict("start", base, True, {"state": "STOPPED", "intent": "run", "start_attempts": 3}) is None
    assert verdict("start", base, False, {"state": "RUNNING", "start_attempts": 2}) == "running"


def test_default_timeout_and_progress_line() -> None:
    """Timeout = startup deadline + drain + grace + 60 s margin; progress shows state, percent, phase."""
    st = {"timeouts": {"startup_deadline_s": 60, "drain_timeout_s": 15, "stop_grace_s": 5}}
    assert default_timeout(st) == 140.0
    assert default_timeout({}) == 1800 + 600 + 120 + 60
    line = progress_line("p", 12.5, {"state": "STARTING", "load_progress": {"pct": 45.7, "phase": "weights"}})
    assert line == "[  12.5s] p: STARTING 45% weights"

"""Loads measured, not guessed, end to end: the real daemon, simulator containers on the real Docker engine,
their real cgroup CPU time. A silent load that burns a core (``VSIM_SILENT_BUSY=1``, a vision warm-up)
outlives a short ``silence_timeout_s``; the same silent load asleep is stopped after it; a second start
of a config shows an ETA from the first one's load time (``status`` JSON and ``supervisorctl status``)."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from supervisor.cli.common import EXIT_NOT_ALL_RUNNING
from supervisor.cli.main import main as cli_main
from tests.daemon_harness import DaemonProc
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SILENCE_S = 6.0
#: The silent phase: more than twice the silence window, so only the CPU can keep the load alive.
SILENT_PHASE_S = "16"


def _events(d: DaemonProc, name: str) -> list[dict[str, Any]]:
    return [e for e in d.events("p") if e["name"] == name]


def _status_text(d: DaemonProc) -> str:
    """``supervisorctl status`` run in this process over the daemon's real socket (its text and exit code
    are checked here; a second interpreter only adds start-up time on a loaded box)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["--socket", str(d.socket), "status"])
    assert code == EXIT_NOT_ALL_RUNNING  # the profile is STARTING
    return out.getvalue()


def test_cpu_busy_silent_load_outlives_the_silence_window_and_shows_an_eta(world: World) -> None:
    env = {"VSIM_SILENT_SECONDS": SILENT_PHASE_S, "VSIM_SILENT_BUSY": "1"}
    world.profile(env=env, silence_timeout_s=SILENCE_S, deadline_s=120.0)
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 90)
    seen = [(e["name"], e["fields"]) for e in d.events("p") if e["name"].startswith(("load.", "effect."))]
    assert not _events(d, "start.timeout"), seen
    activity = [e["fields"]["signal"] for e in _events(d, "load.activity")]
    assert any("cpu" in s for s in activity), activity
    hist = d.call("history", name="p", n=5)["data"]["starts"]
    assert hist[-1]["outcome"] == "ready"
    assert hist[-1]["load_s"] > 2 * SILENCE_S  # silent longer than the window, and not killed
    # a second start of the same config: its status shows when the load should end
    assert d.call("restart", name="p")["ok"]

    def loading_with_eta() -> dict[str, Any] | None:
        st = d.status("p")
        lp = st["load_progress"]
        return st if st["state"] == "STARTING" and lp["eta_s"] is not None else None

    st = wait_for(loading_with_eta, 60, interval=0.2, message="STARTING with an ETA")
    assert st["load_progress"]["history_starts"] == 1
    assert st["load_progress"]["median_load_s"] == pytest.approx(hist[-1]["load_s"], abs=0.2)
    assert "(median load " in _status_text(d)
    d.wait_recovered("p", first["container_id"], 90)
    starts = d.call("history", name="p", n=10)["data"]["starts"]
    # the ETA's start joined the ledger its median came from
    assert len(starts) == 2, (starts, [(e["name"], e["fields"]) for e in d.events("p")])
    assert starts[-1]["load_s"] is not None


def test_idle_silent_load_is_stopped_after_the_silence_window(world: World) -> None:
    world.profile(env={"VSIM_SILENT_SECONDS": "60"}, silence_timeout_s=SILENCE_S, deadline_s=120.0)
    d = world.daemon(breaker_limit=1)

    def timed_out() -> list[dict[str, Any]] | None:
        return _events(d, "start.timeout") or None

    timeouts = wait_for(timed_out, 60, interval=0.5, message="start.timeout")
    assert timeouts[0]["fields"]["kind"] == "silence"
    assert timeouts[0]["fields"]["silent_s"] >= SILENCE_S
    rows = wait_for(lambda: d.call("history", name="p", n=5)["data"]["starts"] or None, 30)
    assert rows[-1]["outcome"] == "timeout_silence"

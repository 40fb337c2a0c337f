"""The hang that burns a core, on the real vLLM 0.32 CPU server (issue 35): the test overlay
tools/overlays/spin makes the engine core's step spin on the CPU once two generations run, so /health stays
200, a core burns and no counter moves (tests/fixtures/progress/spin-spin_busy.json). With the shipped probe
defaults (5 s rounds, chunked prefill on) the daemon judges it stuck by the longest-step bound, reads the
engine core's Python stack with py-spy before the stop, and names the overlay's spinning function (file and
function) in the emergency's reason (the alert), the history's ``engine.stack`` and ``status``. Then the
daemon starts a new container (that it serves again after an emergency on the real server is proven by
tests/test_daemon_real_liveness.py). bench/bench_spin.py times it (median and max of 5 trials)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.detect_real import engine_spin_busy
from bench.detect_trials import ACT_EVENTS, first_event, wait_running
from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, spin_overlay_spec, write_daemon_config, write_profile
from tests.harness import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

#: A generous wait for the stop (the bound it must meet is bench/'s: 30 s); a spinning engine missed, as
#: before issue 35, is never acted on at all.
WAIT_S = 90.0


def test_an_engine_spinning_without_stepping_is_stopped_and_the_alert_names_where(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    venv, tiny = real_vllm_paths
    trigger = Path(tempfile.mkdtemp(prefix="vsup-spin-", dir=tmp_path))
    trigger.chmod(0o777)
    spec = spin_overlay_spec("spin", resources.name("spin"), base_image, venv, tiny, trigger)
    config = write_daemon_config(
        tmp_path, [write_profile(tmp_path, spec, resources.test_id)], backoff_initial_s=0.5, breaker_limit=10
    )
    d = DaemonProc(config, tmp_path)
    base = f"http://127.0.0.1:{spec.port}"
    try:
        d.start()
        cid = wait_running(d, "spin", None, 400)
        # on demand, on a serving engine: where it is now (idle: waiting for requests)
        cli = [
            sys.executable,
            "-m",
            "supervisor.cli",
            "--socket",
            str(d.socket),
            "diagnose",
            "--stack",
            "spin",
        ]
        now = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
        assert now.returncode == 0, now.stderr
        assert "EngineCoreProc.run_busy_loop (vllm/v1/engine/core.py:" in now.stdout, now.stdout
        inj = engine_spin_busy(base, tmp_path / "spin.key", trigger)(d, "spin", cid)
        try:
            ev = wait_for(
                lambda: first_event(d, "spin", inj.at, ACT_EVENTS, lambda e: True),
                WAIT_S,
                interval=0.2,
                message="the emergency stop of the spinning engine",
            )
        finally:
            assert inj.undo is not None
            inj.undo()
        print(f"spinning engine: {ev['name']} {float(ev['ts']) - inj.at:.1f} s after both generations ran")
        assert ev["name"] == "emergency.stop", ev
        reason = str(ev["fields"]["reason"])
        assert "longest step" in reason, reason
        assert "spin_while_triggered (vsup_spin.py:" in reason, reason  # the alert's text
        stacks = [e for e in d.events("spin", n=300) if e["name"] == "engine.stack" and e["ts"] >= inj.at]
        assert stacks, d.event_names("spin")
        top = stacks[0]["fields"]["frames"][0]
        assert (top["function"], top["file"]) == ("spin_while_triggered", "vsup_spin.py"), stacks[0]
        assert stacks[0]["fields"]["same"] >= 2, stacks[0]  # the same frame in every sample

        # restarted: a new container started after the stop (that a restart after an emergency serves again
        # on the real server is proven by tests/test_daemon_real_liveness.py's busy freeze; waiting for this
        # one's load too would add ~23 s of a core and prove nothing more)
        def restarted() -> bool:
            started = [e for e in d.events("spin", n=300) if e["name"] == "container.started"]
            return any(e["ts"] >= ev["ts"] and e["fields"]["container_id"] != cid for e in started)

        wait_for(restarted, 60, message="a new container started after the emergency stop")
    finally:
        d.close()

"""The simulator's SIGTERM behaviour held to the real vLLM 0.32 server's, as recorded by
bench/bench_sigterm.py in tests/fixtures/sigterm/vllm-0.32-cpu.json (docs/vllm-facts.md section 8.1)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.sim_fixtures import start_sim

pytestmark = [pytest.mark.docker]

FIXTURE = Path(__file__).parent / "fixtures" / "sigterm" / "vllm-0.32-cpu.json"
ENGINE_INIT = r"Initializing a V1 LLM engine"
READY = "Application startup complete."


def _recorded(phase: str) -> list[dict[str, Any]]:
    trials = [t for t in json.loads(FIXTURE.read_text(encoding="utf-8"))["trials"] if t["phase"] == phase]
    assert trials, phase
    return trials


def _running_after(sim: Any, seconds: float) -> bool:
    time.sleep(seconds)
    sim.container.reload()
    return bool(sim.container.status == "running")


def test_recorded_real_facts_are_what_the_simulator_follows() -> None:
    """The fixture itself: the first SIGTERM during init never ended a real start; a second one did (130);
    one once ready did (0, within a second); `docker stop` during init ended only at the SIGKILL."""
    assert all(t["exit_s"] is None and t["ready_after_signal"] for t in _recorded("init"))
    assert {t["exit_code"] for t in _recorded("init2")} == {130}
    assert all(t["exit_s"] > t["second_sigterm_s"] for t in _recorded("init2"))
    assert {t["exit_code"] for t in _recorded("initready") + _recorded("serving")} == {0}
    assert all(t["exit_s"] < 1.0 for t in _recorded("serving"))
    assert all(t["exit_code"] == 137 and t["exit_s"] >= 10 for t in _recorded("stop"))


def test_simulator_first_sigterm_during_init_is_lost_and_it_serves(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Phase `init` (then `initready`): lost, ready anyway; a SIGTERM once ready exits 0."""
    sim = start_sim(docker_client, resources, env={"VSIM_LOAD_SECONDS": "6", "VSIM_FLAVOR": "v0_32"})
    sim.wait_log(ENGINE_INIT)
    sim.container.kill(signal="SIGTERM")
    sim.wait_ready(30)
    assert "KeyboardInterrupt" not in sim.logs()
    sim.container.kill(signal="SIGTERM")
    assert sim.wait_exit() == _recorded("initready")[0]["exit_code"]


def test_simulator_second_sigterm_during_init_exits_130(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Phase `init2`: the second SIGTERM ends the start with the real exit code."""
    sim = start_sim(docker_client, resources, env={"VSIM_LOAD_SECONDS": "30", "VSIM_FLAVOR": "v0_32"})
    sim.wait_log(ENGINE_INIT)
    sim.container.kill(signal="SIGTERM")
    assert _running_after(sim, 2.0)
    sim.container.kill(signal="SIGTERM")
    assert sim.wait_exit() == _recorded("init2")[0]["exit_code"]
    assert READY not in sim.logs()


def test_simulator_docker_stop_during_init_ends_at_the_sigkill(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Phase `stop`: `docker stop -t 3` during init takes the whole grace and exits 137."""
    sim = start_sim(docker_client, resources, env={"VSIM_LOAD_SECONDS": "30", "VSIM_FLAVOR": "v0_32"})
    sim.wait_log(ENGINE_INIT)
    began = time.monotonic()
    sim.container.stop(timeout=3)
    took = time.monotonic() - began
    sim.container.reload()
    assert sim.container.attrs["State"]["ExitCode"] == _recorded("stop")[0]["exit_code"]
    assert took >= 3.0, took  # not a timing bound: it proves the SIGTERM did not end it

"""The simulator's frozen engine (as a real vLLM 0.32 engine core under SIGSTOP) and silent exit (Docker)."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import docker
import pytest
import requests

from supervisor.sim import simengine, simhttp
from tests.harness import wait_for
from tests.sim_fixtures import SimHandle, start_sim

pytestmark = pytest.mark.docker

FAST = {"VSIM_LOAD_SECONDS": "1", "VSIM_SHARDS": "4"}
CHAT = {"messages": [{"role": "user", "content": "Say something about foxes, please."}]}
#: What the simulator prints when its engine dies (none of it may appear on a silent exit).
DEATH_LINES = (
    "EngineCore encountered a fatal error",
    "died unexpectedly",
    "exited unexpectedly",
    "EngineDeadError",
    "Shutting down",
    "Application shutdown complete",
)
STATS = "Avg generation throughput"


def metric(sim: SimHandle, name: str) -> float:
    """One sample value of a vllm:* series from /metrics."""
    text = sim.get("/metrics").text
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def post_in_thread(sim: SimHandle, result: dict[str, Any], key: str, timeout: float) -> threading.Thread:
    """A chat completion sent from a thread; its response (or exception) lands in result[key]."""

    def run() -> None:
        try:
            result[key] = sim.post("/v1/chat/completions", json=CHAT, timeout=timeout)
        except requests.RequestException as exc:
            result[key] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_stuck_health_ok_metrics_frozen_then_resume(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Stuck as a SIGSTOPped real engine: health, models 200; hung requests uncounted; resume ends them."""
    sim = start_sim(
        docker_client, resources, env={**FAST, "VSIM_SCENARIO": "stuck", "VSIM_DIE_AFTER_REQUESTS": "1"}
    )
    sim.wait_ready()
    assert sim.post("/v1/chat/completions", json=CHAT).status_code == 200
    with pytest.raises(requests.Timeout):  # the engine froze as the first request finished
        sim.post("/v1/completions", json={"prompt": "x"}, timeout=1.5)
    frozen = metric(sim, "vllm:generation_tokens_total")
    result: dict[str, Any] = {}

    t = post_in_thread(sim, result, "resp", 30)
    wait_for(lambda: sim.get("/load").json()["server_load"] >= 2, 5, message="two requests held")
    assert sim.health_code() == 200
    assert sim.get("/v1/models").status_code == 200
    # the real server's gauges keep the engine's last report (idle here): hung requests are invisible
    assert metric(sim, "vllm:num_requests_running") == 0
    assert metric(sim, "vllm:num_requests_waiting") == 0
    with pytest.raises(requests.Timeout):
        sim.post("/v1/chat/completions", json=CHAT, timeout=1)
    assert metric(sim, "vllm:generation_tokens_total") == frozen
    assert sim.post("/_sim/fault", json={"kind": "resume"}).json() == {"accepted": "resume"}
    t.join(timeout=15)
    assert result["resp"].status_code == 200  # as after `kill -CONT`: the hung request completes
    wait_for(lambda: metric(sim, "vllm:generation_tokens_total") > frozen, 5, message="tokens move again")


def test_stuck_mid_batch_keeps_last_gauges_and_prints_no_stats(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Stuck with 2 running: running stays 2 (a hung third is not added), tokens stop, one last stats line."""
    sim = start_sim(
        docker_client, resources, env={**FAST, "VSIM_GEN_SECONDS": "4", "VSIM_STATS_INTERVAL": "0.5"}
    )
    sim.wait_ready()
    result: dict[str, Any] = {}
    threads = [post_in_thread(sim, result, f"r{i}", 30) for i in range(2)]
    wait_for(lambda: metric(sim, "vllm:num_requests_running") == 2, 5, message="two requests running")
    wait_for(lambda: STATS in sim.logs(), 5, message="a stats line while busy")
    assert sim.post("/_sim/fault", json={"kind": "stuck"}).json() == {"accepted": "stuck"}
    wait_for(lambda: sim.get("/load").json()["server_load"] == 2, 5, message="fault applied")
    frozen = metric(sim, "vllm:generation_tokens_total")
    # as the real server: one more stats line with no throughput and the stale Running count, then none
    wait_for(lambda: f"{STATS}: 0.0 tokens/s, Running: 2 reqs" in sim.logs(), 5, message="a last stats line")
    stats_lines = sim.logs().count(STATS)
    threads.append(post_in_thread(sim, result, "r2", 30))
    wait_for(lambda: sim.get("/load").json()["server_load"] == 3, 5, message="third request held")
    with pytest.raises(requests.Timeout):  # 1.5 s: three stats periods of the busy engine
        sim.post("/v1/completions", json={"prompt": "x"}, timeout=1.5)
    assert metric(sim, "vllm:num_requests_running") == 2
    assert metric(sim, "vllm:generation_tokens_total") == frozen
    assert sim.logs().count(STATS) == stats_lines
    assert sim.health_code() == 200
    assert sim.post("/_sim/fault", json={"kind": "resume"}).status_code == 200
    for t in threads:
        t.join(timeout=20)
    assert [result[f"r{i}"].status_code for i in range(3)] == [200, 200, 200]


def test_silent_exit_after_requests_exit_0_no_death_lines(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """silent_exit after 2 requests: both answered 200, then exit 0 with no engine-death or shutdown line."""
    sim = start_sim(
        docker_client,
        resources,
        env={**FAST, "VSIM_FLAVOR": "v0_32", "VSIM_SCENARIO": "silent_exit", "VSIM_DIE_AFTER_REQUESTS": "2"},
    )
    sim.wait_ready()
    assert sim.post("/v1/chat/completions", json=CHAT).status_code == 200
    assert sim.post("/v1/completions", json={"prompt": "x"}).status_code == 200
    assert sim.wait_exit() == 0
    logs = sim.logs()
    for needle in DEATH_LINES:
        assert needle not in logs, needle
    assert sim.stdout().rstrip().splitlines()[-1].endswith('"POST /v1/completions HTTP/1.1" 200 OK')


def test_silent_exit_after_seconds(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """silent_exit by time (VSIM_DIE_AFTER s after ready): exit 0, the ready line is the last word."""
    sim = start_sim(
        docker_client, resources, env={**FAST, "VSIM_SCENARIO": "silent_exit", "VSIM_DIE_AFTER": "0.5"}
    )
    assert sim.wait_exit() == 0
    logs = sim.logs()
    assert sim.stdout().rstrip().splitlines()[-1].endswith("Application startup complete.")
    for needle in DEATH_LINES:
        assert needle not in logs, needle


def test_spin_burns_cpu_while_stuck_and_stops_at_resume() -> None:
    """The `spin` fault's burner (in-process): CPU time moves while the engine is stuck, none after resume."""
    engine = simengine.Engine(4, 100_000, 0, 50_000.0, 0)
    assert engine.stick()
    cpu0 = time.process_time()
    t = threading.Thread(target=simhttp._spin, args=(engine, 0.5), daemon=True)
    t.start()
    wait_for(lambda: time.process_time() - cpu0 >= 0.2, 10, message="spin burns CPU")
    assert t.is_alive()
    assert engine.resume()
    t.join(timeout=5)
    assert not t.is_alive()

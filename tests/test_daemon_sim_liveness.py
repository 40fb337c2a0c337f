"""The real daemon, shipped probe defaults (5 s rounds, freeze 15 s, canary 10 s), against the simulator's
long monolithic prefill (counted nowhere on /metrics for 40 s, only the container's CPU time moves, as on
real vLLM) and its frozen engine: the prefill completes with no emergency, the freeze is acted on."""

from __future__ import annotations

import time

import pytest
import requests

from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SHIPPED = {"interval_s": 5.0, "failure_threshold": 4, "stall_after_s": 120.0, "probe_timeout_s": 30.0}


def test_a_long_monolithic_prefill_is_busy_and_a_freeze_is_stuck(world: World) -> None:
    world.profile(
        args=["--model", "/models/sim", "--served-model-name", "sim-model", "--no-enable-chunked-prefill"],
        env={"VSIM_PREFILL_TOKENS_PER_S": "500"},
        **SHIPPED,  # type: ignore[arg-type]
    )
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    key = world.key()
    prompt = list(range(10, 10 + 20_000))  # token ids: 40 s of prefill at 500 tokens/s
    start = time.monotonic()
    r = requests.post(
        world.url() + "/v1/completions",
        json={"model": "sim-model", "prompt": prompt, "max_tokens": 2},
        headers={"Authorization": f"Bearer {key}"},
        timeout=300,
    )
    took = time.monotonic() - start
    assert r.status_code == 200
    print(f"20,000-token monolithic prefill on the simulator: {took:.1f} s")
    names = d.event_names("p")
    assert "emergency.stop" not in names
    assert "probe.failed" not in names
    assert d.status("p")["container_id"] == first
    rounds = [e for e in d.events("p", n=300) if e["name"] == "probe.saturated"]
    assert rounds  # the canary sent when the server looked idle waited, while the CPU time moved

    world.fault("stuck")
    frozen = time.time()
    ev = wait_for(
        lambda: next((e for e in d.events("p") if e["name"] == "emergency.stop"), None),
        75,
        interval=0.5,
        message="the emergency stop of the frozen simulator",
    )
    acted = float(ev["ts"]) - frozen
    print(f"simulator frozen engine acted on after {acted:.1f} s")
    assert acted <= 45.0, acted

"""The performance sentinel end to end on the simulator (the real daemon as a subprocess, real Docker).

The simulator's ``slow`` fault makes every decode step longer (docs/simulator.md): after the baseline is
taken the sentinel reports the decay (three slow canaries in a row), shows SLOW in `status`, and with
``on_decay: restart`` gives the profile a drained maintenance restart that restores the speed. A request
in flight keeps the canary away."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import requests

from tests.harness import wait_for
from tests.sim_world import World

pytestmark = pytest.mark.docker

#: 64 tokens in 0.64 s: 10 ms a token (about 100 tok/s); the ``slow`` fault adds 40 ms a step (~20 tok/s).
SIM_ENV = {"VSIM_GEN_SECONDS": "0.64", "VSIM_MAX_TOKENS_DEFAULT": "64"}
SLOW_MS = 40


def _sentinel(on_decay: str) -> dict[str, Any]:
    return {
        "sentinel": {
            "warmup_s": 0,
            "interval_s": 1,
            "busy_retry_s": 0.5,
            "decay_pct": 50,
            "on_decay": on_decay,
            "min_restart_interval_s": 3600,
        }
    }


def _samples(d: Any) -> list[dict[str, Any]]:
    return [e["fields"] for e in d.events("p") if e["name"] == "sentinel.sample"]


def _slow_fault(world: World, ms: float) -> None:
    r = requests.post(world.url() + "/_sim/fault", json={"kind": "slow", "ms": ms}, timeout=5)
    assert r.json() == {"accepted": "slow"}


def test_decay_alerts_shows_slow_and_recovers(world: World) -> None:
    world.profile(env=SIM_ENV, extra=_sentinel("alert"))
    d = world.daemon()
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: len(_samples(d)) >= 3, 60, message="three canaries for the baseline")
    base = _samples(d)[-1]["baseline_tps"]
    assert base is not None
    assert base > 40
    _slow_fault(world, SLOW_MS)
    wait_for(lambda: "sentinel.slow" in d.event_names("p"), 60, message="sentinel.slow")
    slow = [e for e in d.events("p") if e["name"] == "sentinel.slow"][-1]["fields"]
    assert "baseline" in slow["message"]
    assert "tok/s" in slow["message"]
    st = wait_for(lambda: (s := d.status("p"))["sentinel"]["slow"] and s, 10, message="status SLOW")
    assert st["state"] == "RUNNING"  # liveness untouched
    assert st["sentinel"]["decode_tps"] < base / 2
    assert "alert.raised" in d.event_names("p") or "alert.sent" in d.event_names("p")
    _slow_fault(world, 0)
    wait_for(lambda: "sentinel.recovered" in d.event_names("p"), 60, message="sentinel.recovered")
    wait_for(lambda: d.status("p")["sentinel"]["slow"] is False, 10, message="status no longer SLOW")


def test_decay_restart_policy_restores_speed(world: World) -> None:
    world.profile(env=SIM_ENV, extra=_sentinel("restart"))
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    wait_for(lambda: len(_samples(d)) >= 3, 60, message="three canaries for the baseline")
    _slow_fault(world, SLOW_MS)  # the new container starts at normal speed
    wait_for(lambda: "sentinel.restart" in d.event_names("p"), 60, message="sentinel.restart")
    d.wait_recovered("p", first, 90)
    second = d.status("p")["container_id"]
    assert second != first

    def fast_on_second() -> bool:
        rows = [s for s in _samples(d) if s["container_id"] == second]
        return bool(rows) and not rows[-1]["slow"]

    wait_for(fast_on_second, 60, message="a normal-speed canary on the restarted container")
    rows = [s for s in _samples(d) if s["container_id"] == second]
    assert rows[-1]["baseline_tps"] is not None  # the first container's starts are this one's history
    assert rows[-1]["decode_tps"] >= rows[-1]["baseline_tps"] / 2


def test_no_canary_while_a_request_runs(world: World) -> None:
    world.profile(env=SIM_ENV, extra=_sentinel("alert"))
    d = world.daemon()
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: len(_samples(d)) >= 1, 60, message="a first canary")
    # 200 ms a token from now on: a 64-token user request runs for about 13 s, from a thread
    _slow_fault(world, 200)
    done = threading.Event()

    def user() -> None:
        try:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
            headers = {"Authorization": f"Bearer {world.key()}"}
            requests.post(world.url() + "/v1/chat/completions", json=body, headers=headers, timeout=60)
        finally:
            done.set()

    t = threading.Thread(target=user, daemon=True)
    t.start()
    wait_for(lambda: _canary_running(world), 10, message="the user's request is running")
    before = len(_samples(d))
    done.wait(60)
    # a canary started just before the user's request may end during it (allow one); none starts in it
    assert len(_samples(d)) - before <= 1
    t.join(10)
    _slow_fault(world, 0)
    wait_for(lambda: len(_samples(d)) > before + 1, 60, message="canaries again once idle")


def _canary_running(world: World) -> bool:
    text = requests.get(world.url() + "/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1]) > 0
    return False

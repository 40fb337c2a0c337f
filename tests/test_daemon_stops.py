"""The real daemon (a subprocess) on simulator containers: probes never stop while a profile drains."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest
import requests

from tests.daemon_harness import sim_args
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SIM_ARGS = sim_args()


def _running_requests(world: World) -> float:
    for line in requests.get(world.url() + "/metrics", timeout=5).text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_freeze_during_a_drain_is_an_emergency_long_before_the_drain_timeout(world: World) -> None:
    """restart drains a healthy engine (a slow request runs); the engine freezes mid-drain: the liveness
    rounds that go on while draining end the drain with an emergency, instead of waiting out the 600 s
    drain_timeout_s for a request that never finishes."""
    world.profile(
        env={"VSIM_GEN_SECONDS": "6"},
        interval_s=2.0,
        failure_threshold=3,
        stall_after_s=60.0,
        probe_timeout_s=20.0,
        stop_timeout=30,
        extra={"stop": {"drain_timeout_s": 600, "grace_s": 30, "emergency_grace_s": 5}},
    )
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    key = world.key()
    result: dict[str, Any] = {}

    def slow_request() -> None:
        try:
            r = requests.post(
                world.url() + "/v1/completions",
                json={"model": "sim-model", "prompt": "x", "max_tokens": 16},
                headers={"Authorization": f"Bearer {key}"},
                timeout=60,
            )
            result["status"] = r.status_code
        except requests.RequestException as exc:
            result["error"] = str(exc)

    t = threading.Thread(target=slow_request, daemon=True)
    t.start()
    wait_for(lambda: _running_requests(world) >= 1, 10, message="request in flight")
    reply = d.call("restart", name="p")
    assert reply["ok"], reply
    assert d.status("p")["state"] == "DRAINING", reply  # healthy: drained, not stopped at once
    world.fault("stuck")
    emergency = wait_for(
        lambda: next((e for e in d.events("p") if e["name"] == "emergency.stop"), None),
        120,  # generous against a loaded box; the drain itself would wait 600 s
        interval=0.5,
        message="the emergency stop of the engine frozen mid-drain",
    )
    drained = next(
        e for e in d.events("p") if e["name"] == "state.changed" and e["fields"]["new"] == "DRAINING"
    )
    took = float(emergency["ts"]) - float(drained["ts"])
    print(f"freeze during a drain acted on {took:.1f} s after the drain began (drain_timeout_s 600)")
    names = d.event_names("p")
    assert "drain.timeout" not in names
    seq = [(e["fields"]["old"], e["fields"]["new"]) for e in d.events("p") if e["name"] == "state.changed"]
    assert ("DRAINING", "STOPPING") in seq
    st = d.wait_recovered("p", first, 90)
    assert st["breaker"]["emergencies"] >= 1  # an emergency, counted as one
    t.join(70)


def test_the_memory_guard_during_a_load_ends_it_after_the_emergency_grace(world: World) -> None:
    """The simulator loses the SIGTERM of a stop during its engine's initialisation, as real vLLM 0.32 does:
    only the SIGKILL ends the load. The memory guard's stop must come after stop.emergency_grace_s (3 s),
    not after the planned stop.grace_s (60 s): the container is gone long before the planned grace."""
    world.profile(
        env={"VSIM_LOAD_SECONDS": "120", "VSIM_SHARDS": "60"},
        deadline_s=300.0,
        stop_timeout=60,
        extra={"stop": {"drain_timeout_s": 15, "grace_s": 60, "emergency_grace_s": 3}},
    )
    d = world.daemon(
        breaker_limit=1,
        extra={
            "host": {
                "drop_caches": False,
                "load_lock_path": str(world.tmp / "load.lock"),
                # a "minimum" far above this box's memory: every real sample is low (a box about to freeze)
                "memory_guard": {"enabled": True, "mem_available_min_gib": 4000, "samples": 3},
            }
        },
    )
    pressure = wait_for(  # generous: on a loaded box (the parallel suite) the container starts late
        lambda: next((e for e in d.events("p") if e["name"] == "memory.pressure"), None),
        180,
        interval=0.2,
        message="memory.pressure during the load",
    )
    exited = wait_for(
        lambda: next((e for e in d.events("p") if e["name"] == "container.exited"), None),
        90,
        interval=0.2,
        message="the load's container gone",
    )
    took = float(exited["ts"]) - float(pressure["ts"])
    print(f"memory guard -> container gone: {took:.1f} s (emergency grace 3 s, planned grace 60 s)")
    assert took < 30, took  # half the planned grace: with it the lost SIGTERM would cost 60 s
    assert exited["fields"]["exit_code"] == 137  # the SIGKILL ended it, not the SIGTERM
    # the ledger row follows the exit once the failed start is diagnosed (the kernel ring is read first)
    starts = wait_for(
        lambda: d.call("history", name="p", n=5)["data"]["starts"], 30, message="the failed start's row"
    )
    assert starts[-1]["outcome"] == "failed_memory_guard"


def test_the_memory_guard_turns_a_planned_stop_of_a_load_into_a_kill(world: World) -> None:
    """An operator stop of a load waits out the planned 60 s grace (the simulator, as vLLM 0.32, loses its
    SIGTERM). The memory guard, tripping meanwhile, makes it a kill at once: the kill is its own job, not
    dropped behind the `docker stop -t 60` still waiting."""
    world.profile(
        env={"VSIM_LOAD_SECONDS": "120", "VSIM_SHARDS": "60"},
        deadline_s=300.0,
        stop_timeout=60,
        extra={"stop": {"drain_timeout_s": 15, "grace_s": 60, "emergency_grace_s": 3}},
    )
    d = world.daemon(
        extra={
            "host": {
                "drop_caches": False,
                "load_lock_path": str(world.tmp / "load.lock"),
                # trips 15 samples (15 s) after the daemon starts, while the stop below waits its grace
                "memory_guard": {"enabled": True, "mem_available_min_gib": 4000, "samples": 15},
            }
        },
    )
    d.wait_state("p", "STARTING", 30)
    phase = lambda: any(e["fields"].get("phase") == "engine_starting" for e in d.events("p"))  # noqa: E731
    wait_for(phase, 30, interval=0.2, message="the engine initialising")
    assert d.call("stop", name="p")["ok"]
    stopped_at = time.time()
    exited = wait_for(
        lambda: next((e for e in d.events("p") if e["name"] == "container.exited"), None),
        90,
        interval=0.2,
        message="the load's container gone",
    )
    took = float(exited["ts"]) - stopped_at
    names = d.event_names("p")
    print(f"operator stop of a load + memory guard -> gone {took:.1f} s after the stop (planned grace 60 s)")
    assert "stop.escalated" in names, "\n".join(str((e["name"], e["fields"])) for e in d.events("p")[-10:])
    assert "start.failed" not in names  # the guard found it stopping, not loading
    assert took < 30, took
    assert d.wait_state("p", "STOPPED", 30)["intent"] == "stop"


def test_a_shutdown_that_freezes_is_killed_long_before_the_planned_grace(world: World) -> None:
    """An operator stop of a server that drains with --shutdown-timeout 100 (vLLM lets running requests go on
    that long, /health 200) but whose engine froze just before: the probe rounds that go on while STOPPING
    see requests run and no token move for interval x (threshold - 1) and make the stop a kill, instead of
    waiting out the 60 s grace."""
    world.profile(
        env={"VSIM_GEN_SECONDS": "20"},
        args=[*SIM_ARGS, "--shutdown-timeout", "100"],
        interval_s=2.0,
        failure_threshold=3,
        stall_after_s=60.0,
        probe_timeout_s=30.0,
        stop_timeout=60,
        extra={"stop": {"drain_timeout_s": 15, "grace_s": 60, "emergency_grace_s": 3}},
    )
    d = world.daemon()
    d.wait_state("p", "RUNNING", 60)
    key = world.key()

    def slow_request() -> None:
        with contextlib.suppress(requests.RequestException):
            requests.post(
                world.url() + "/v1/completions",
                json={"model": "sim-model", "prompt": "x", "max_tokens": 16},
                headers={"Authorization": f"Bearer {key}"},
                timeout=90,
            )

    threading.Thread(target=slow_request, daemon=True).start()
    wait_for(lambda: _running_requests(world) >= 1, 10, message="request in flight")
    world.fault("stuck")  # then the stop at once: the serving judgement needs 4 s to call it an emergency
    assert d.call("stop", name="p")["ok"]
    stopped_at = time.time()
    exited = wait_for(
        lambda: next((e for e in d.events("p") if e["name"] == "container.exited"), None),
        90,
        interval=0.2,
        message="the container gone",
    )
    took = float(exited["ts"]) - stopped_at
    print(f"frozen shutdown killed {took:.1f} s after the stop (planned grace 60 s, --shutdown-timeout 100)")
    names = d.event_names("p")
    assert "stop.escalated" in names, names
    assert took < 30, took
    st = d.wait_state("p", "STOPPED", 30)
    assert st["breaker"]["emergencies"] == 0  # still the operator's stop

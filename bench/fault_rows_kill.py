"""Fault-matrix rows about when the daemon kills a server: never for a long prefill; at once for a frozen
engine or API server, a kernel memory error line and the memory guard tripping during a load.

Same contract as bench/fault_rows.py: each returns an :class:`Outcome` (passed, seconds fault -> end state,
detail). The rows that send a request of their own run without an API key (the request must reach the
engine, not a 401). The kernel-line row writes the real ``/dev/kmsg`` (root) and its daemon sets
``host.kernel_memory_error: kill`` (the harness' default is ``warn``, so other tests' daemons ignore it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid

import requests

from bench.compare_faults import IDLE_REQUEST_AFTER_S, long_prompt
from bench.fault_env import FaultEnv
from bench.fault_rows import Outcome, _names, _recovers, _running
from tests.daemon_harness import ProfileSpec
from tests.harness import wait_for
from tests.kmsg_probe import NOMEM, die_events, kmsg_writable, write_kmsg

#: The fast-timing daemon's freeze window is the shipped 15 s; a 20 s prefill outlasts it (and 3 probes).
PREFILL_RATE = 100
PREFILL_TOKENS = 2_000


def long_prefill(env: FaultEnv) -> Outcome:
    """A 20 s single-step prefill (nothing on /metrics moves but the CPU time): no emergency, HTTP 200."""
    return _prefill(env, PREFILL_RATE, hogs=0, timeout=120)


#: The starved prefill: 2,000 tokens at 400 tokens/s are 5 s of CPU, about 40 s on the eighth of a core
#: its container gets beside STARVING_HOGS spinning containers on the same CPU (the simulator's prefill
#: spins for its CPU time, as a real one computes): its CPU time stays under the 0.2-core bound for longer
#: than the 15 s freeze window, while its prefill thread is runnable throughout.
STARVED_RATE = 400
STARVING_HOGS = 7


def starved_prefill(env: FaultEnv) -> Outcome:
    """The long prefill on a CPU eight containers share (docs/vllm-facts.md "Forward progress under CPU
    starvation"): no emergency, HTTP 200 after more than the freeze window, the same container."""
    return _prefill(env, STARVED_RATE, hogs=STARVING_HOGS, timeout=300)


def _prefill(env: FaultEnv, rate: int, hogs: int, timeout: float) -> Outcome:
    """PREFILL_TOKENS at ``rate`` tokens/s of CPU, the server on CPU 0 with ``hogs`` spinning containers
    there when ``hogs`` > 0 (removed after the answer)."""
    spec, d, cid = _running(env, api_key=False, env={"VSIM_PREFILL_TOKENS_PER_S": str(rate)})
    hog_names = [f"{spec.container}-hog{i}" for i in range(hogs)]
    if hogs:
        env.container(spec).update(cpuset_cpus="0")
    for name in hog_names:
        env.names.append(name)
        spin = ["python3", "-c", "while True: pass"]
        env.client.containers.run(env.image, entrypoint=spin, name=name, detach=True, cpuset_cpus="0")
    t0 = time.time()
    body = {
        "model": spec.served,
        "messages": [{"role": "user", "content": long_prompt(PREFILL_TOKENS)}],
        "max_tokens": 4,
    }
    r = requests.post(f"http://127.0.0.1:{spec.port}/v1/chat/completions", json=body, timeout=timeout)
    secs = round(time.time() - t0, 2)
    for name in hog_names:
        with contextlib.suppress(Exception):
            env.client.containers.get(name).remove(force=True)
    st = d.status(spec.name)
    stops = [n for n in _names(d, spec.name) if n == "emergency.stop"]
    ok = r.status_code == 200 and not stops and st["container_id"] == cid and st["state"] == "RUNNING"
    ok = ok and (not hogs or secs > 15.0)  # a starved one did outlast the freeze window
    return Outcome(ok, secs, f"HTTP {r.status_code} after {secs} s, emergencies={len(stops)}, same container")


def _request_later(spec: ProfileSpec) -> None:
    """A request IDLE_REQUEST_AFTER_S from now (it hangs on a frozen engine: bounded, its answer unused)."""

    def send() -> None:
        time.sleep(IDLE_REQUEST_AFTER_S)
        body = {"model": spec.served, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        with contextlib.suppress(requests.RequestException):
            requests.post(f"http://127.0.0.1:{spec.port}/v1/chat/completions", json=body, timeout=30)

    threading.Thread(target=send, daemon=True).start()


def engine_frozen_idle(env: FaultEnv) -> Outcome:
    """The engine frozen while idle (the simulator's ``stuck``), a request 3 s later."""

    def inflict(spec: ProfileSpec) -> float:
        t0 = env.fault(spec, {"kind": "stuck"})
        _request_later(spec)
        return t0

    return _recovers(env, inflict, need="emergency.stop", api_key=False)  # the request must reach the engine


def api_server_frozen(env: FaultEnv) -> Outcome:
    """SIGSTOP of the container's main process (the simulator is one process): /health does not answer."""

    def inflict(spec: ProfileSpec) -> float:
        pid = int(env.container(spec).attrs["State"]["Pid"])
        env.cleanups.append(lambda: os.kill(pid, signal.SIGCONT))
        t0 = time.time()
        os.kill(pid, signal.SIGSTOP)
        return t0

    return _recovers(env, inflict, need="emergency.stop")


def nv_err_no_memory(env: FaultEnv) -> Outcome:
    """An NV_ERR_NO_MEMORY line while serving, policy ``kill``: SIGKILL (exit 137), then RUNNING again."""
    if not kmsg_writable():
        return Outcome(False, None, "/dev/kmsg is not writable (run as root)")
    spec = env.spec()
    # Other engineers' tests write labelled NV_ERR lines to the same /dev/kmsg and this daemon acts on every
    # one (the line names no process): a breaker of 3 opened on such foreign lines in one trial (FATAL)
    d = env.daemon([spec], breaker_limit=100, extra={"host": {"kernel_memory_error": "kill"}})
    cid = str(d.wait_state(spec.name, "RUNNING", 60)["container_id"])
    t0 = write_kmsg(NOMEM.format(token=f"vsup_bench_flt_{uuid.uuid4().hex}"))
    dies = wait_for(lambda: die_events(env.client, spec.container, t0), 30, message="die event")
    killed = round(dies[0]["timeNano"] / 1e9 - t0, 2)
    code = dies[0]["Actor"]["Attributes"].get("exitCode")
    st = d.wait_recovered(spec.name, cid, 90)
    ok = code == "137" and st["state"] == "RUNNING"
    return Outcome(ok, killed, f"killed after {killed} s, exit {code}, then RUNNING in a new container")


def memory_guard_load(env: FaultEnv) -> Outcome:
    """The guard's minimum above this box's memory (every sample low) during a 30 s load: the container
    is gone after the emergency grace, the start's outcome is failed_memory_guard. Gone is Docker's
    ``die`` of the profile's container name: on a loaded box the guard may trip while the container is
    still being created, and the late one is an unwanted container the daemon stops (no
    ``container.exited`` of the profile; one of 3 trials on 2026-12-05, load 16)."""
    spec = env.spec(env={"VSIM_LOAD_SECONDS": "30", "VSIM_SHARDS": "30"}, deadline_s=120.0)
    guard = {"enabled": True, "mem_available_min_gib": 4000, "samples": 3}
    d = env.daemon([spec], breaker_limit=1, extra={"host": {"memory_guard": guard}})

    def event(name: str) -> dict[str, object] | None:
        return next((e for e in d.events(spec.name) if e["name"] == name), None)

    pressure = wait_for(lambda: event("memory.pressure"), 60, interval=0.2, message="memory.pressure")
    tripped = float(str(pressure["ts"]))
    dies = wait_for(
        lambda: die_events(env.client, spec.container, tripped), 90, interval=0.5, message="the load gone"
    )
    secs = round(dies[0]["timeNano"] / 1e9 - tripped, 2)
    starts = wait_for(lambda: d.call("history", name=spec.name, n=5)["data"]["starts"], 30, message="ledger")
    outcome = starts[-1].get("outcome")
    return Outcome(outcome == "failed_memory_guard", secs, f"gone {secs} s after the trip, outcome={outcome}")

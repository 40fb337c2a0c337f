"""The fault matrix' rows for the field's hard shapes (issue 40): the daemon alone, what it must end in.

The same faults as bench/compare_field.py (all restarters side by side), here against the matrix' daemon
(the test harness' fast timings; the kernel rows with ``host.kernel_memory_error: kill``, the shipped
default). Each row's detail says what the daemon did, so a row that fails today records today's behaviour.
"""

from __future__ import annotations

import time
import uuid

from bench.compare_field import (
    BOOT_LINE,
    BOOT_LINES,
    BOOT_SPREAD_S,
    FIELD_PREFILL_RATE,
    FORGED_LINE,
    INIT_SCENARIO,
    LOW_BLOCKS,
    LOW_BUDDYINFO,
)
from bench.fault_env import FaultEnv
from bench.fault_rows import Outcome
from supervisor.adapters.host.buddyinfo import BUDDYINFO_ENV
from tests.harness import wait_for
from tests.kmsg_probe import die_events, kmsg_writable, write_kmsg

KILL = {"host": {"kernel_memory_error": "kill"}}
#: The bound on the spinning engine (issue 35: acted on within 30 s); the row waits this long past it.
SPIN_BOUND_S = 30.0
SPIN_WAIT_S = 60.0


def engine_spinning(env: FaultEnv) -> Outcome:
    """The engine stuck and burning CPU (the simulator's ``spin``): acted on within SPIN_BOUND_S s.

    The engine is the field's: it prefills at FIELD_PREFILL_RATE prompt tokens/s and the profile says so
    (``probes.prefill_tokens_per_s``, as the shipped Spark example profile does), so the longest legitimate
    step is 2 x 8,192 / 1,670 = 9.8 s, under the 15 s floor. With no rate in the profile and none learned
    yet the bound would be 2 x 8,192 / 100 = 164 s (the default rate), past this row's window: the field's
    box never runs so. The rate is set rather than learned from a first lone prompt: the field's profile
    sets it, and the row's figure then does not hang on how one timed sample fell on a loaded box
    (learning is tested apart: tests/test_machine_liveness.py).
    """
    rate = {"VSIM_PREFILL_TOKENS_PER_S": f"{FIELD_PREFILL_RATE:g}"}
    spec = env.spec(env=rate, probes_extra={"prefill_tokens_per_s": FIELD_PREFILL_RATE})
    d = env.daemon([spec])
    cid = str(d.wait_state(spec.name, "RUNNING", 60)["container_id"])
    t0 = env.fault(spec, {"kind": "spin", "duty": 1.0})  # a whole core, as the field's hung CUDA sync
    end = t0 + SPIN_WAIT_S
    while time.time() < end and d.status(spec.name)["container_id"] == cid:
        time.sleep(0.5)
    st = d.status(spec.name)
    if st["container_id"] == cid:
        live = st.get("liveness") or {}
        why = f"verdict {live.get('verdict')}, signal {live.get('signal')}"
        return Outcome(False, None, f"nothing in {SPIN_WAIT_S:g} s: same container, {st['state']} ({why})")
    secs = round(time.time() - t0, 2)
    stopped = "emergency.stop" in [e["name"] for e in d.events(spec.name)]
    ok = stopped and secs <= SPIN_BOUND_S + 5
    return Outcome(ok, secs, f"restarted after {secs} s (emergency.stop={stopped})")


def healthy_boot_nv_err(env: FaultEnv) -> Outcome:
    """BOOT_LINES NV_ERR lines over the first BOOT_SPREAD_S s of a 20 s load that completes: no kill."""
    if not kmsg_writable():
        return Outcome(False, None, "/dev/kmsg is not writable (run as root)")
    spec = env.spec(env={"VSIM_LOAD_SECONDS": "20", "VSIM_SHARDS": "10"})
    d = env.daemon([spec], extra=KILL)
    wait_for(lambda: d.status(spec.name)["container_id"], 60, message="the load's container")
    token = f"vsup_bench_boot_{uuid.uuid4().hex}"
    t0 = time.time()
    for i in range(BOOT_LINES):
        time.sleep(max(0.0, t0 + i * BOOT_SPREAD_S / BOOT_LINES - time.time()))
        write_kmsg(BOOT_LINE.format(token=f"{token}_{i}"))
    try:
        st = d.wait_state(spec.name, "RUNNING", 90)
    except AssertionError:
        st = d.status(spec.name)
    kills = len(die_events(env.client, spec.container, t0))
    failed = [e["fields"].get("outcome") for e in d.events(spec.name) if e["name"] == "start.failed"]
    ok = kills == 0 and st["state"] == "RUNNING"
    detail = f"{kills} kills of the load, ended {st['state']}, failed starts {failed}"
    return Outcome(ok, round(time.time() - t0, 2), detail)


def forged_kernel_line(env: FaultEnv) -> Outcome:
    """The NV_ERR text inside another subsystem's line while serving: no kill within 15 s."""
    if not kmsg_writable():
        return Outcome(False, None, "/dev/kmsg is not writable (run as root)")
    spec = env.spec()
    d = env.daemon([spec], breaker_limit=100, extra=KILL)
    cid = str(d.wait_state(spec.name, "RUNNING", 60)["container_id"])
    t0 = write_kmsg(FORGED_LINE.format(token=f"vsup_bench_forged_{uuid.uuid4().hex}"))
    time.sleep(15.0)  # the window a kill would fall in (the kill path acts in well under 1 s)
    kills = len(die_events(env.client, spec.container, t0))
    same = d.status(spec.name)["container_id"] == cid
    return Outcome(kills == 0 and same, None, f"{kills} kills of a healthy server, same container={same}")


def init_failure_same_line(env: FaultEnv) -> Outcome:
    """Every start dies on the same traceback line: the daemon gives up after 2 loads (issue 37)."""
    spec = env.spec(env={"VSIM_SCENARIO": INIT_SCENARIO})
    t0 = time.time()
    d = env.daemon([spec])
    try:
        st = d.wait_state(spec.name, "FATAL", 90)
    except AssertionError:
        st = d.status(spec.name)
    loads = len(die_events(env.client, spec.container, t0))
    secs = round(time.time() - t0, 2)
    ok = st["state"] == "FATAL" and loads == 2
    return Outcome(ok, secs, f"{loads} loads, then {st['state']} (want FATAL after 2)")


def low_contiguity_before_start(env: FaultEnv) -> Outcome:
    """The host low on contiguous memory before a start (LOW_BUDDYINFO: the field's GB10 a few hours after a
    restart, 12 free 4 MiB blocks; fed through the adapter's test seam ``VSUP_BUDDYINFO``, since a shared
    host's memory cannot be fragmented safely): the start's preflight warns (``start.contiguity_low``, the
    ``contiguity.start`` alert) before the container is created, and the start goes on (a reboot is the
    operator's call); the host sampler raises ``contiguity.low`` too."""
    spec = env.spec()
    d = env.daemon([spec], start=False)
    d.start(extra_env={BUDDYINFO_ENV: str(LOW_BUDDYINFO)})
    t0 = time.time()
    st = d.wait_state(spec.name, "RUNNING", 60)
    names = [e["name"] for e in d.events(spec.name)]
    created = names.index("container.started") if "container.started" in names else len(names)
    warned = "start.contiguity_low" in names[:created]
    kinds = wait_for(lambda: [k for k in env.alerts() if k == "contiguity.start"], 15, message="the alert")
    detail = (
        f"warned before the container: {warned} (alerts {kinds}), then {st['state']} "
        f"({LOW_BLOCKS} free 4 MiB blocks, threshold 256)"
    )
    return Outcome(warned and st["state"] == "RUNNING", round(time.time() - t0, 2), detail)

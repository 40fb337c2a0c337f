"""The kernel kill rule on the real /dev/kmsg with the shipped policy (``kernel_memory_error: kill``), real
Docker and the simulator (docs/wedge.md "Which kernel lines kill"):

* the field's healthy GB10 boot (60 NV_ERR_NO_MEMORY lines over the first 10 s of a load, memory fine)
  leaves the load to finish in the same container;
* forged lines (an OOM report naming a cgroup after the NV_ERR message, a session cgroup ending in our
  container id, an ambiguous ``oom-kill:`` summary) kill nothing;
* a daemon restarted with another boot id while serving leaves its adopted container alone for a line
  written before it started, and a line written while it serves still ends the container.

Every test here runs a daemon with policy ``kill``: any NV_ERR line another test writes would kill its
container, so each is ``kmsg`` (docs/testing.md). The latency of the kill is bench/bench_wedge.py's figure.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from tests.daemon_harness import write_daemon_config, write_profile
from tests.harness import wait_for
from tests.kmsg_probe import NOMEM, die_events, kmsg_writable, write_kmsg
from tests.sim_world import World
from tests.test_daemon_night import BootDaemon, _can_unshare

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HEALTHY = (
    "<3>NVRM: GPU0 nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359 {token} {i}\n"
)
OOM = "<3>Out of memory: Killed process {pid} (python3) total-vm:1024kB, anon-rss:512kB, file-rss:0kB\n"
SUMMARY = (
    "<3>oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg={memcg},task_memcg={memcg},task=python3,pid={pid},uid=1000\n"
)


def _host(world: World, **extra: Any) -> dict[str, Any]:
    # memory "fine" whatever this box holds: the near floor (the guard's debounced floor) at 0.1 GiB
    guard = {"enabled": False, "mem_available_min_gib": 0.1}
    return {
        "drop_caches": False,
        "load_lock_path": str(world.tmp / "load.lock"),
        "memory_guard": guard,
        **extra,
    }


def _named(d: Any, name: str, profile: str | None = None) -> list[dict[str, Any]]:
    return [e for e in d.events(profile, n=3000) if e["name"] == name]


def _reaped_pid() -> int:
    pid = 4_000_000 + uuid.uuid4().int % 190_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def _skip_without_root() -> None:
    if not kmsg_writable():
        pytest.skip("/dev/kmsg is not writable here (needs root)")


@pytest.mark.kmsg  # policy kill, and 60 NV_ERR lines every daemon on the box reads
def test_the_fields_healthy_boot_leaves_the_load_to_finish(world: World) -> None:
    """STARTING (a 20 s simulated load: the KV pool line comes after ~17 s), 60 NV_ERR_NO_MEMORY lines over
    the first 10 s with the host's memory fine: the same container reaches RUNNING; every line is in the
    history, the profile recorded one kernel.tolerated and no kill."""
    _skip_without_root()
    token = f"vsup_healthy_{uuid.uuid4().hex}"
    world.profile(env={"VSIM_LOAD_SECONDS": "20"}, silence_timeout_s=60.0)
    d = world.daemon(breaker_limit=5, extra={"host": _host(world, kernel_memory_error="kill")})
    wait_for(lambda: _named(d, "kernel_log.following"), 20, message="kmsg")
    st = d.wait_state("p", "STARTING", 30)
    wait_for(lambda: d.status("p").get("container_id"), 20, message="the container")
    started = d.status("p")["container_id"]
    assert st["state"] == "STARTING"
    t0 = time.monotonic()
    for i in range(60):  # paced: the stimulus is the field's rate, one line every 1/6 s
        time.sleep(max(0.0, t0 + i * (10.0 / 60) - time.monotonic()))
        write_kmsg(HEALTHY.format(token=token, i=i))
    lines = wait_for(
        lambda: (
            [e for e in _named(d, "kernel.nv_err_no_memory") if token in e["fields"]["line"]]
            if len([e for e in _named(d, "kernel.nv_err_no_memory") if token in e["fields"]["line"]]) == 60
            else None
        ),
        20,
        message="the 60 lines in the history",
    )
    assert {str(e["fields"]["whose"]) for e in lines} == {str({"p": "nobody"})}
    ran = d.wait_state("p", "RUNNING", 60)
    assert ran["container_id"] == started
    assert not _named(d, "emergency.kill", "p")
    assert len(_named(d, "kernel.tolerated", "p")) >= 1


@pytest.mark.kmsg  # policy kill: any NV_ERR line another test of this run writes kills it
def test_forged_kernel_lines_kill_nothing(world: World) -> None:
    """Serving under policy kill: an OOM report line naming a cgroup after the NV_ERR message, OOM kills of
    reaped python processes whose cgroup is a session scope ending in our container id or an ambiguous
    summary with two task_memcg: the container serves on; the OOM kills are recorded as another's."""
    _skip_without_root()
    world.profile()
    d = world.daemon(breaker_limit=5, extra={"host": _host(world, kernel_memory_error="kill")})
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: _named(d, "kernel_log.following"), 30, message="kmsg")
    cid = world.container().id
    nv = "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"
    write_kmsg(f"<6>Memory cgroup stats for /user.slice/user-1000.slice/{nv}:\n")
    session = _reaped_pid()
    write_kmsg(SUMMARY.format(memcg=f"/user.slice/user-1000.slice/{cid}", pid=session))
    write_kmsg(OOM.format(pid=session))
    twice = _reaped_pid()
    forged = f"/user.slice/a,task_memcg=/docker/{cid}"
    write_kmsg(SUMMARY.format(memcg=forged, pid=twice))
    write_kmsg(OOM.format(pid=twice))

    def whose(pid: int) -> list[dict[str, Any]]:
        return [e for e in _named(d, "kernel.oom_kill") if e["fields"]["pid"] == pid]

    wait_for(lambda: whose(session) and whose(twice), 10, message="the two oom kills")
    assert whose(session)[0]["fields"]["whose"] == {"p": "other"}
    assert whose(twice)[0]["fields"]["whose"] == {"p": "other"}
    assert not [
        e for e in _named(d, "kernel.nv_err_no_memory") if "Memory cgroup stats" in e["fields"]["line"]
    ]
    assert not _named(d, "emergency.kill", "p")
    assert d.status("p")["state"] == "RUNNING"
    assert world.container().id == cid
    # the contiguity sentinel's figures ride along in the status document (status --json)
    host = d.call("status")["data"]["daemon"]["host"]
    assert isinstance(host["contiguity"]["free_4mib_blocks"], int)
    assert host["contiguity"]["threshold"] == 256


@pytest.mark.kmsg  # policy kill, and NV_ERR lines every daemon on the box reads
def test_a_restarted_daemon_judges_no_old_line_and_still_kills_for_a_new_one(world: World) -> None:
    """Serving; the daemon SIGKILLed; an NV_ERR_NO_MEMORY line written while it is down; a daemon with
    another boot id (it reads this boot's whole ring again) adopts the container and leaves it serving, the
    old line recorded as backlog; a line written now still ends the container (SIGKILL, 137)."""
    _skip_without_root()
    if not _can_unshare(world.tmp):
        pytest.skip("needs a mount namespace (unshare -m) for another boot id")
    boot = world.tmp / "boot_id"
    boot.write_text(f"{uuid.uuid4()}\n")
    spec = world.profile()
    paths = [write_profile(world.tmp, s, world.res.test_id) for s in world.specs.values()]
    config = write_daemon_config(
        world.tmp, paths, breaker_limit=5, extra={"host": _host(world, kernel_memory_error="kill")}
    )
    first = BootDaemon(config, world.tmp, boot)
    world.daemons.append(first)
    first.start()
    first.wait_state("p", "RUNNING", 60)
    wait_for(lambda: _named(first, "kernel_log.following"), 30, message="kmsg")
    write_kmsg(f"<6>vsup-test position marker {uuid.uuid4().hex}\n")  # the follower has a position ...
    saved = world.tmp / "state" / "kmsg.position.json"
    wait_for(saved.exists, 20, message="the saved kmsg position")  # ... saved within 10 s
    cid = world.container().id
    first.kill9()
    old = f"vsup_replay_{uuid.uuid4().hex}"
    write_kmsg(NOMEM.format(token=old))
    boot.write_text(f"{uuid.uuid4()}\n")
    second = BootDaemon(config, world.tmp, boot)
    world.daemons.append(second)
    second.start()
    seen = wait_for(
        lambda: [e for e in _named(second, "kernel.nv_err_no_memory") if old in e["fields"]["line"]],
        30,
        message="the old line read again",
    )
    assert seen[0]["fields"]["backlog"] is True
    second.wait_state("p", "RUNNING", 60)
    assert world.container().id == cid
    assert world.container().status == "running"
    assert not _named(second, "emergency.kill", "p")
    new = f"vsup_serving_{uuid.uuid4().hex}"
    written = write_kmsg(NOMEM.format(token=new))
    kill = wait_for(
        lambda: [e for e in _named(second, "emergency.kill", "p") if new in e["fields"]["reason"]],
        20,
        message="emergency.kill for the new line",
    )[0]
    assert kill["fields"]["cause"] == "kernel"
    dies = wait_for(lambda: die_events(world.res.client, spec.container, written), 20, message="die event")
    assert dies[0]["Actor"]["Attributes"]["exitCode"] == "137"


@pytest.mark.kmsg  # 300 OOM-kill lines in the shared kernel log
def test_a_flood_of_anothers_oom_kills_is_held_back_and_the_loop_answers(world: World) -> None:
    """300 OOM kills of another's processes (gone pids, a name vLLM never runs as) in a burst: 30 reach
    the history, the rest are counted (status kernel_log.held_back); the daemon answers and serves on."""
    _skip_without_root()
    world.profile()
    d = world.daemon(extra={"host": _host(world)})
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: _named(d, "kernel_log.following"), 30, message="kmsg")
    comm = f"vf{uuid.uuid4().hex[:10]}"
    flood = 300
    for _ in range(flood):
        write_kmsg(f"<3>Out of memory: Killed process {_reaped_pid()} ({comm}) total-vm:1kB, anon-rss:1kB\n")

    def held() -> int:
        return int(d.call("status")["data"]["daemon"]["kernel_log"]["held_back"])

    wait_for(lambda: held() >= flood - 30, 30, message="the held-back count")
    recorded = [e for e in _named(d, "kernel.oom_kill") if comm in e["fields"]["line"]]
    assert 1 <= len(recorded) <= 30  # another test's OOM lines may share the window's quota
    assert d.status("p")["state"] == "RUNNING"


@pytest.mark.kmsg  # policy kill, and an NV_ERR line every daemon on the box reads
def test_a_load_that_dies_is_still_diagnosed_from_its_kernel_line_under_policy_kill(world: World) -> None:
    """Field report 000 under the shipped policy: vLLM only says "Engine core initialization failed", the
    NV_ERR_NO_MEMORY line comes while the profiler probes with memory fine: not killed (the engine's own exit
    ends the start), and the failed start is diagnosed from the line, as before the rule."""
    _skip_without_root()
    # the simulated engine dies 4 s into its load (a tenth of VSIM_LOAD_SECONDS): the line comes before
    world.profile(env={"VSIM_SCENARIO": "fail_engine_init", "VSIM_LOAD_SECONDS": "40"})
    token = uuid.uuid4().hex[:8]
    d = world.daemon(
        breaker_limit=5,
        backoff_initial_s=30.0,
        backoff_max_s=60.0,
        extra={"host": _host(world, kernel_memory_error="kill")},
    )
    wait_for(lambda: _named(d, "kernel_log.following"), 20, message="kernel log followed")
    d.wait_state("p", "STARTING", 30)  # STARTING comes before the container exists: wait for it too
    wait_for(lambda: d.status("p").get("container_id"), 20, message="the container")
    write_kmsg(
        "<3>NVRM: GPU0 nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
        f"returned from _memdescAllocInternal(vsup_seed000_{token})\n"
    )
    diagnosed = wait_for(lambda: _named(d, "start.diagnosed", "p"), 40, message="start.diagnosed")[0]
    assert "nv_err_no_memory" in diagnosed["fields"]["kernel"]
    assert "gpu-memory-utilization" in diagnosed["fields"]["diagnosis"]
    row = d.call("history", name="p", n=5)["data"]["starts"][-1]
    assert row["outcome"] == "failed_engine_init"  # the engine's exit, not a kill
    assert not _named(d, "emergency.kill", "p")
    assert _named(d, "kernel.tolerated", "p")

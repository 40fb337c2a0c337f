"""The real daemon saving the host: a real NV_ERR_NO_MEMORY line on /dev/kmsg and the hard memory floor
SIGKILL a simulator container at once (Docker's ``die`` event, exit code 137). The latency figure is in
bench/bench_wedge.py (median of >= 5), not asserted here beyond a hang guard."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from tests.harness import wait_for
from tests.kmsg_probe import NOMEM, die_events, kmsg_writable, write_kmsg
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _host(world: World, **extra: Any) -> dict[str, Any]:
    return {"drop_caches": False, "load_lock_path": str(world.tmp / "load.lock"), **extra}


def _named(d: Any, profile: str, name: str) -> list[dict[str, Any]]:
    return [e for e in d.events(profile, n=2000) if e["name"] == name]


@pytest.mark.kmsg  # policy kill: any NV_ERR line another test of this run writes kills it
def test_nv_err_no_memory_on_the_real_kmsg_kills_the_serving_container(world: World) -> None:
    """RUNNING simulator + a labelled NV_ERR_NO_MEMORY written to /dev/kmsg: the container dies by SIGKILL
    (137, no SIGTERM grace), as an emergency whose reason is the line; it counts in the breaker."""
    if not kmsg_writable():
        pytest.skip("/dev/kmsg is not writable here (needs root)")
    token = f"vsup_wedge_{uuid.uuid4().hex}"
    spec = world.profile()
    d = world.daemon(
        breaker_limit=5,
        extra={"host": _host(world, memory_guard={"enabled": False}, kernel_memory_error="kill")},
    )
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: [e for e in d.events(n=500) if e["name"] == "kernel_log.following"], 30, message="kmsg")
    written = write_kmsg(NOMEM.format(token=token))
    kill = wait_for(
        lambda: [e for e in _named(d, "p", "emergency.kill") if token in e["fields"]["reason"]],
        20,
        message="emergency.kill",
    )[0]
    assert kill["fields"]["cause"] == "kernel"
    assert kill["fields"]["state"] == "RUNNING"
    dies = wait_for(lambda: die_events(world.res.client, spec.container, written), 20, message="die event")
    assert dies[0]["Actor"]["Attributes"]["exitCode"] == "137"
    print(f"kmsg write -> docker die: {dies[0]['timeNano'] / 1e9 - written:.3f} s")
    emergency = [e for e in _named(d, "p", "emergency.stop") if token in e["fields"]["reason"]]
    assert emergency, "the emergency's reason is the kernel line"
    st = d.wait_state("p", "RUNNING", 60)  # restarted at once (first failure of a streak)
    assert st["breaker"]["emergencies"] >= 1
    kernel = [e for e in d.events(n=2000) if e["name"] == "kernel.nv_err_no_memory"]
    assert any(token in e["fields"]["line"] and e["fields"]["whose"] == {"p": "nobody"} for e in kernel)


def test_the_hard_memory_floor_kills_at_once(world: World) -> None:
    """A hard floor above the host's MemAvailable: the first sample kills the container (137) before the
    debounced guard (the same threshold, 2 samples) can trip; the start is a failed start that reaches
    the breaker."""
    spec = world.profile()
    since = time.time()
    guard = {
        "enabled": True,
        "samples": 2,
        "mem_available_min_gib": 4000,
        "hard_mem_available_min_gib": 4000,
    }
    d = world.daemon(breaker_limit=2, extra={"host": _host(world, memory_guard=guard)})
    # a hang guard: the floor acts on the first sample once a container exists, after preflight, settle and
    # the create (6 s alone; more than 30 s once beside the parallel phase and a soak on the 2 cores)
    floor = wait_for(lambda: _named(d, "p", "memory.hard_floor"), 90, message="memory.hard_floor")[0]
    assert "hard floor 4000 GiB" in floor["fields"]["detail"]
    kill = wait_for(lambda: _named(d, "p", "emergency.kill"), 10, message="emergency.kill")[0]
    assert kill["fields"]["cause"] == "memory_floor"
    dies = wait_for(lambda: die_events(world.res.client, spec.container, since), 20, message="die event")
    assert dies[0]["Actor"]["Attributes"]["exitCode"] == "137"
    d.wait_state("p", "FATAL", 90)  # every start is killed: the breaker ends the loop
    names = d.event_names("p")
    first_kill = names.index("emergency.kill")
    # the debounced guard watches the same threshold: the hard floor acted before its second sample
    assert "memory.pressure" not in names[:first_kill], names[:first_kill]


@pytest.mark.kmsg  # policy kill: any NV_ERR line another test of this run writes kills it
def _serving_with_kill(world: World) -> tuple[Any, Any]:
    """One RUNNING simulator profile under ``kernel_memory_error: kill``, its daemon following /dev/kmsg."""
    if not kmsg_writable():
        pytest.skip("/dev/kmsg is not writable here (needs root)")
    spec = world.profile()
    d = world.daemon(
        breaker_limit=5,
        extra={"host": _host(world, memory_guard={"enabled": False}, kernel_memory_error="kill")},
    )
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: [e for e in d.events(n=500) if e["name"] == "kernel_log.following"], 30, message="kmsg")
    return spec, d


@pytest.mark.kmsg  # python3 OOM-kill lines, no container named: a failed start beside took one as cause
def test_an_oom_kill_line_is_attributed_by_pid_to_the_right_container(world: World) -> None:
    """OOM-kill lines on the real /dev/kmsg: one naming a host process outside every container (this
    test's own pid) kills nothing; one naming the pid of the process inside the container (found in its
    cgroup) kills that container at once."""
    spec, d = _serving_with_kill(world)
    oom = "<3>Out of memory: Killed process {pid} (python3) total-vm:1024kB, anon-rss:512kB, file-rss:0kB\n"
    mine = os.getpid()
    write_kmsg(oom.format(pid=mine))
    ev = wait_for(
        lambda: [
            e for e in d.events(n=2000) if e["name"] == "kernel.oom_kill" and e["fields"]["pid"] == mine
        ],
        10,
        message="oom_kill of another process",
    )[0]
    assert ev["fields"]["whose"] == {"p": "other"}
    assert d.status("p")["state"] == "RUNNING"
    pid = int(world.container().attrs["State"]["Pid"])
    written = write_kmsg(oom.format(pid=pid))
    kill = wait_for(lambda: _named(d, "p", "emergency.kill"), 20, message="emergency.kill")[0]
    assert f"Killed process {pid}" in kill["fields"]["reason"]
    dies = wait_for(lambda: die_events(world.res.client, spec.container, written), 20, message="die event")
    assert dies[0]["Actor"]["Attributes"]["exitCode"] == "137"
    ours = [e for e in d.events(n=2000) if e["name"] == "kernel.oom_kill" and e["fields"]["pid"] == pid]
    assert ours[0]["fields"]["whose"] == {"p": "ours"}


def _reaped_pid() -> int:
    """A pid no process has now (the OOM killer's victim, already reaped)."""
    pid = 4_000_000 + uuid.uuid4().int % 190_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


@pytest.mark.kmsg  # policy kill: any NV_ERR line another test of this run writes kills it
def test_a_reaped_victims_cgroup_from_the_oom_killers_summary_decides_whose_it_is(world: World) -> None:
    """A python process OOM-killed and reaped before the daemon could look it up: the kernel's own
    ``oom-kill:`` summary line names its cgroup. Another job's cgroup kills nothing (without that line a
    reaped python victim goes to whoever serves); this container's cgroup kills it at once."""
    spec, d = _serving_with_kill(world)
    summary = (
        "<3>oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        "task_memcg={memcg},task=python3,pid={pid},uid=1000\n"
    )
    oom = "<3>Out of memory: Killed process {pid} (python3) total-vm:1024kB, anon-rss:512kB, file-rss:0kB\n"

    def whose(pid: int) -> list[dict[str, Any]]:
        return [e for e in d.events(n=2000) if e["name"] == "kernel.oom_kill" and e["fields"]["pid"] == pid]

    theirs = _reaped_pid()
    write_kmsg(summary.format(memcg="/user.slice/user-1000.slice/session-9.scope", pid=theirs))
    write_kmsg(oom.format(pid=theirs))
    ev = wait_for(lambda: whose(theirs), 10, message="oom_kill of another job's reaped process")[0]
    assert ev["fields"]["whose"] == {"p": "other"}
    assert not _named(d, "p", "emergency.kill")
    assert d.status("p")["state"] == "RUNNING"
    cid = world.container().id
    ours = _reaped_pid()
    write_kmsg(summary.format(memcg=f"/system.slice/docker-{cid}.scope", pid=ours))
    written = write_kmsg(oom.format(pid=ours))
    kill = wait_for(lambda: _named(d, "p", "emergency.kill"), 20, message="emergency.kill")[0]
    assert f"Killed process {ours}" in kill["fields"]["reason"]
    assert whose(ours)[0]["fields"]["whose"] == {"p": "ours"}
    dies = wait_for(lambda: die_events(world.res.client, spec.container, written), 20, message="die event")
    assert dies[0]["Actor"]["Attributes"]["exitCode"] == "137"

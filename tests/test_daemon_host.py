"""The real daemon and the host: real /dev/kmsg lines, real /dev/shm segments, orphan-looking processes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host.orphans import find_orphans
from supervisor.config import HostConfig
from supervisor.core.clock import SystemClock
from supervisor.core.host_events import HostAfterStop, ShmSwept
from supervisor.daemon.executor import host_jobs
from tests.conftest import Resources
from tests.daemon_harness import DaemonProc
from tests.harness import TEST_LABEL, WebhookReceiver, container_cgroup, wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NOMEM = (
    "<3>NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal({token}) @ mem_desc.c:1353\n"
)
XID = (
    "<4>NVRM: Xid (PCI:0000:0a:00): 31, pid={pid}, name=VLLM::EngineCor, channel 0x00000002. "
    "MMU Fault: ENGINE GRAPHICS GPC0 faulted @ {token}\n"
)


def _write_kmsg(text: str) -> None:
    try:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
    except OSError as exc:
        pytest.skip(f"/dev/kmsg is not writable here ({exc.strerror}); this test needs root")
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _host(world: World, **extra: Any) -> dict[str, Any]:
    """The harness's host section plus ``extra``."""
    return {
        "drop_caches": False,
        "load_lock_path": str(world.tmp / "load.lock"),
        "memory_guard": {"enabled": False},
        "kernel_memory_error": "warn",  # the kill path: tests/test_daemon_wedge.py
        **extra,
    }


def _alerts(webhook: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in webhook.received() if r.path.startswith("/alert/")]


def _daemon_events(d: DaemonProc, name: str) -> list[dict[str, Any]]:
    return [e for e in d.events(n=2000) if e["name"] == name]


@pytest.mark.kmsg  # a memory-error line in the shared kernel log: every daemon's diagnosis reads it
def test_kernel_events_while_serving_warn_and_name_the_cause_of_a_death(
    world: World, webhook: WebhookReceiver
) -> None:
    """NV_ERR on the real /dev/kmsg while serving: event + warning alert; an Xid then a kill: the death
    alert names the Xid. The reserve warning, host memory and the follower are in the status document."""
    token = f"vsup_host_{uuid.uuid4().hex}"
    pid = random.randint(100_000, 999_999)
    world.profile()
    d = world.daemon(
        extra={
            "alerts": {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]},
            "host": _host(world, reserve_gib=4000),
        }
    )
    d.wait_state("p", "RUNNING", 60)
    wait_for(lambda: _daemon_events(d, "kernel_log.following"), 30, message="kernel log followed")
    _write_kmsg(NOMEM.format(token=token))
    ev = wait_for(
        lambda: [e for e in _daemon_events(d, "kernel.nv_err_no_memory") if token in e["fields"]["line"]],
        10,
        message="kernel.nv_err_no_memory event",
    )[0]
    assert ev["fields"]["summary"] == "NV_ERR_NO_MEMORY"
    warn = wait_for(
        lambda: [a for a in _alerts(webhook) if a["title"].startswith("kernel:") and token in a["reason"]],
        10,
        message="kernel warning alert",
    )[0]
    assert (warn["severity"], warn["title"]) == ("warning", "kernel: NV_ERR_NO_MEMORY while serving")
    assert d.status("p")["state"] == "RUNNING"  # the server survived: a warning, nothing stopped
    reserve = wait_for(
        lambda: [a for a in _alerts(webhook) if a["title"] == "host memory reserve too small after load"],
        10,
        message="reserve warning",
    )[0]
    assert "< reserve 4000 GiB" in reserve["reason"]
    daemon = d.call("status")["data"]["daemon"]
    assert daemon["kernel_log"]["mode"] == "kmsg"
    assert {"mem_available_gib", "swap_used_gib", "swap_total_gib", "psi"} <= set(daemon["host"])

    _write_kmsg(XID.format(pid=pid, token=token))
    wait_for(
        lambda: [e for e in _daemon_events(d, "kernel.xid") if e["fields"]["pid"] == pid], 10, message="xid"
    )
    world.container().kill()
    died = wait_for(
        lambda: [a for a in _alerts(webhook) if a["title"] == "container died"], 20, message="death alert"
    )[0]
    assert "kernel: " in died["reason"]
    assert f"Xid 31 (pid {pid} VLLM::EngineCor)" in died["reason"]
    exited = [e for e in d.events("p") if e["name"] == "container.exited" and not e["fields"]["requested"]]
    assert f"Xid 31 (pid {pid} VLLM::EngineCor)" in exited[-1]["fields"]["kernel"]
    position = world.tmp / "state" / "kmsg.position.json"
    wait_for(position.exists, 15, message="kmsg position saved")
    assert d.terminate() == 0
    assert json.loads(position.read_text())["seq"] >= ev["fields"]["seq"]


@pytest.mark.exclusive  # sweeps every free psm_/sem.mp- segment of the real /dev/shm, other tests' too
def test_leaked_shm_is_swept_before_the_start(world: World) -> None:
    """Free psm_/sem.mp- segments in the real /dev/shm are removed right before a container that shares the
    host's IPC namespace is created."""
    names = [f"psm_vsup{uuid.uuid4().hex[:12]}", f"sem.mp-vsup{uuid.uuid4().hex[:8]}"]
    paths = [Path("/dev/shm") / n for n in names]
    try:
        for p in paths:
            p.write_bytes(b"\1" * (1 << 20))
        world.profile(extra_container={"ipc_mode": "host"})
        d = world.daemon()
        d.wait_state("p", "RUNNING", 60)
        swept = [e for e in d.events("p") if e["name"] == "shm.swept"]
        removed = " ".join(r for e in swept for r in e["fields"]["removed"])
        assert all(n in removed for n in names), swept
        assert not any(p.exists() for p in paths)
        assert sum(e["fields"]["freed_bytes"] for e in swept) >= 2 << 20
        order = [
            e["name"]
            for e in d.events("p")
            if e["name"] in ("settle.begun", "shm.swept", "container.started")
        ]
        assert order[:3] == ["settle.begun", "shm.swept", "container.started"]
    finally:
        for p in paths:
            p.unlink(missing_ok=True)


def test_a_private_ipc_container_leaves_the_hosts_shm_alone(tmp_path: Path) -> None:
    """Settling for a container with its own IPC namespace sweeps nothing: a free segment (another user's,
    or another program's) stays."""
    seg = tmp_path / f"psm_vsup{uuid.uuid4().hex[:12]}"
    seg.write_bytes(b"\1" * 4096)
    hcfg = HostConfig(drop_caches=False, min_mem_available_gib=0)
    (swept, *_rest) = host_jobs.settle(hcfg, SystemClock(), shm_dir=tmp_path, host_ipc=False)
    assert isinstance(swept, ShmSwept)
    assert swept.removed == ()
    assert seg.exists()
    (swept_host, *_rest) = host_jobs.settle(hcfg, SystemClock(), shm_dir=tmp_path, host_ipc=True)
    assert isinstance(swept_host, ShmSwept)
    assert [r.split(" ")[0] for r in swept_host.removed] == [seg.name]


def _fake_orphan() -> subprocess.Popen[bytes]:
    """A real host process titled like a vLLM worker (argv[0] ``VLLM::Worker_TP0``)."""
    return subprocess.Popen(["bash", "-c", "exec -a VLLM::Worker_TP0 sleep 300"])


def test_orphans_after_a_stop_are_reported(world: World, webhook: WebhookReceiver) -> None:
    """A VLLM::-titled process alive after our container stops is reported (event + warning alert)."""
    world.profile()
    d = world.daemon(
        extra={"alerts": {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]}}
    )
    d.wait_state("p", "RUNNING", 60)
    proc = _fake_orphan()
    try:
        wait_for(lambda: "VLLM::" in Path(f"/proc/{proc.pid}/cmdline").read_text(), 5, message="titled")
        assert d.call("stop", name="p")["ok"]
        d.wait_state("p", "STOPPED", 30)
        ev = wait_for(
            lambda: [e for e in d.events("p") if e["name"] == "host.orphans"], 30, message="host.orphans"
        )[0]
        mine = [o for o in ev["fields"]["orphans"] if o["pid"] == proc.pid]
        assert mine == [
            {
                "pid": proc.pid,
                "name": "VLLM::Worker_TP0",
                "rss_bytes": mine[0]["rss_bytes"],
                "reason": "vllm_title",
                "outcome": "reported",
            }
        ]
        assert proc.poll() is None  # report only (the default): untouched
        alert = wait_for(
            lambda: [a for a in _alerts(webhook) if a["title"].startswith("the host is not clean")], 10
        )[0]
        assert f"VLLM::Worker_TP0 pid {proc.pid}" in alert["reason"]
    finally:
        proc.kill()
        proc.wait(5)


def _titled(pid: int) -> Callable[[], bool]:
    return lambda: "VLLM::" in Path(f"/proc/{pid}/cmdline").read_text()


def test_after_stop_job_kills_only_what_it_may() -> None:
    """host.orphans kill: the job SIGTERMs a real VLLM::-titled orphan left in the stopped container's
    cgroup; a bare VLLM:: process in no container is only reported; `report` leaves both alone."""
    gone_id = uuid.uuid4().hex + uuid.uuid4().hex  # a container id that runs nowhere
    proc, bare = _fake_orphan(), _fake_orphan()
    try:
        with container_cgroup(gone_id) as group:
            (group / "cgroup.procs").write_text(str(proc.pid))
            for pid in (proc.pid, bare.pid):
                wait_for(_titled(pid), 5, message="titled")

            def only_mine(cid: str, running: Any) -> Any:
                # the real search, narrowed to our processes: other people's VLLM:: processes on this
                # shared machine must never be signalled by a test
                return [o for o in find_orphans(cid, running) if o.pid in (proc.pid, bare.pid)]

            docker = DockerAdapter()
            report = host_jobs.after_stop(docker, gone_id, None, None, HostConfig(), SystemClock(), only_mine)
            assert isinstance(report[0], HostAfterStop)
            assert sorted((o.pid, o.reason, o.outcome) for o in report[0].orphans) == sorted(
                [(proc.pid, "cgroup", "reported"), (bare.pid, "vllm_title", "reported")]
            )
            assert proc.poll() is None
            killed = host_jobs.after_stop(
                docker, gone_id, None, None, HostConfig(orphans="kill"), SystemClock(), only_mine
            )
            assert isinstance(killed[0], HostAfterStop)
            assert sorted((o.pid, o.outcome) for o in killed[0].orphans) == sorted(
                [(proc.pid, "terminated"), (bare.pid, "reported")]
            )
            assert proc.wait(5) is not None
            assert bare.poll() is None  # another user's bare-metal vLLM survives host.orphans: kill
    finally:
        for p in (proc, bare):
            if p.poll() is None:
                p.kill()
                p.wait(5)


def test_after_stop_of_a_container_that_still_runs_reports_nothing(
    resources: Resources, base_image: str
) -> None:
    """A container Docker keeps listing as running (left alone on a manual stop) has no orphans: no answer."""
    c = resources.client.containers.run(
        base_image,
        ["sleep", "120"],
        name=resources.name("still"),
        labels={TEST_LABEL: resources.test_id},
        detach=True,
    )
    cid = str(c.id)
    resources.track(cid)
    assert host_jobs.after_stop(DockerAdapter(), cid, None, None, HostConfig(), SystemClock()) == []

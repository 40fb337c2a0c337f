"""Orphan processes: real VLLM::-titled processes, a real Docker container, a real held file, real signals."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from supervisor.adapters.host.orphans import Orphan, container_of, find_orphans, kill_orphans
from tests.conftest import Resources
from tests.harness import container_cgroup, wait_for

OTHER_ID = "f" * 64  # a stopped container that never existed: no process is in its cgroup

COMM_TITLE = """
import signal, sys
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open("/proc/self/comm", "w") as f:
    f.write("VLLM::EngineCore")  # the kernel keeps 15 characters: VLLM::EngineCor
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def spawned(*argv: str, ready_line: bool = False) -> Iterator[subprocess.Popen[str]]:
    """A child process killed and reaped at the end, whatever happens."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if ready_line:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _argv0_title() -> tuple[str, ...]:
    return ("bash", "-c", "exec -a VLLM::Worker_TP0 sleep 600")


def _by_pid(orphans: list[Orphan]) -> dict[int, Orphan]:
    return {o.pid: o for o in orphans}


def test_vllm_titled_processes_are_found() -> None:
    """A process titled via argv[0] (exec -a) and one via /proc/self/comm are reported as vllm_title."""
    with (
        spawned(*_argv0_title()) as by_argv,
        spawned(sys.executable, "-c", COMM_TITLE, "x", ready_line=True) as by_comm,
    ):
        wait_for(lambda: "VLLM::Worker_TP0" in " ".join(_cmdline(by_argv.pid)), 10, message="exec -a")
        found = _by_pid(find_orphans(OTHER_ID, running_ids=[]))
        assert found[by_argv.pid].reason == "vllm_title"
        assert found[by_argv.pid].name == "VLLM::Worker_TP0"
        assert found[by_comm.pid].reason == "vllm_title"
        assert found[by_comm.pid].name == "VLLM::EngineCor"
        assert found[by_comm.pid].rss_bytes > 1024 * 1024
        assert os.getpid() not in found
        assert 1 not in found


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


@pytest.fixture
def titled_container(resources: Resources, base_image: str) -> tuple[str, int]:
    """A running container of the base image whose main process is titled VLLM::Worker_TP0: (id, host pid)."""
    client: docker.DockerClient = resources.client
    c = client.containers.run(
        base_image,
        ["bash", "-c", "exec -a VLLM::Worker_TP0 sleep 600"],
        name=resources.name("orphans"),
        labels=resources.labels,
        detach=True,
    )

    def host_pid() -> int | None:
        c.reload()
        pid = int(c.attrs["State"]["Pid"])
        return pid if pid and "VLLM::Worker_TP0" in _cmdline(pid)[0] else None

    return str(c.id), wait_for(host_pid, 30, message="container process")


def test_process_of_running_container_is_not_an_orphan(titled_container: tuple[str, int]) -> None:
    """A VLLM::-titled process inside a running container is not an orphan of another container."""
    cid, pid = titled_container
    assert container_of(pid) == cid
    assert pid not in _by_pid(find_orphans(OTHER_ID, running_ids=[cid]))
    assert pid not in _by_pid(find_orphans(OTHER_ID, running_ids=[cid[:12]]))
    with pytest.raises(ValueError, match="still running"):
        find_orphans(cid[:12], running_ids=[cid])


def test_process_in_the_containers_cgroup_is_found(titled_container: tuple[str, int]) -> None:
    """Given the container's own id (as if it had stopped), its process is found by cgroup."""
    cid, pid = titled_container
    found = _by_pid(find_orphans(cid[:12], running_ids=[]))
    assert found[pid].reason == "cgroup"
    assert found[pid].container_id == cid


def test_kill_refuses_a_process_of_a_running_container(titled_container: tuple[str, int]) -> None:
    """kill_orphans never signals a pid of a running container, pid 1 or itself."""
    cid, pid = titled_container
    (orphan,) = [o for o in find_orphans(cid, running_ids=[]) if o.pid == pid]
    me = Orphan(os.getpid(), "pytest", 0, "vllm_title", 0.0, None, "")
    init = Orphan(1, "init", 0, "vllm_title", 0.0, None, "")
    results = kill_orphans([orphan, me, init], grace_s=1, container_id=cid, running_ids=[cid])
    assert [(r.pid, r.outcome) for r in results] == sorted(
        [(pid, "refused"), (os.getpid(), "refused"), (1, "refused")]
    )
    assert Path(f"/proc/{pid}").exists()


def test_kill_policy_terminates_then_kills() -> None:
    """Two processes left in a stopped container's cgroup: one exits on SIGTERM; one ignoring SIGTERM is
    SIGKILLed after the grace period."""
    cid = uuid.uuid4().hex + uuid.uuid4().hex
    with (
        container_cgroup(cid) as group,
        spawned(*_argv0_title()) as polite,
        spawned(sys.executable, "-c", COMM_TITLE, "stubborn", ready_line=True) as stubborn,
    ):
        for pid in (polite.pid, stubborn.pid):
            (group / "cgroup.procs").write_text(str(pid))
        mine = {polite.pid, stubborn.pid}
        orphans = [o for o in find_orphans(cid, running_ids=[]) if o.pid in mine]  # never others' processes
        assert sorted((o.pid, o.reason) for o in orphans) == sorted((p, "cgroup") for p in mine)
        results = {r.pid: r.outcome for r in kill_orphans(orphans, grace_s=0.5, container_id=cid)}
        assert results == {polite.pid: "terminated", stubborn.pid: "killed"}
        assert not Path(f"/proc/{polite.pid}").exists()  # wait_procs reaped our children
        assert not Path(f"/proc/{stubborn.pid}").exists()
        assert kill_orphans(orphans, grace_s=0.5, container_id=cid)[0].outcome == "gone"


def test_a_bare_vllm_process_outside_any_container_survives_the_kill_policy() -> None:
    """A `VLLM::` process in no container (another user's bare-metal vLLM) is reported as vllm_title and
    refused by kill_orphans: no proof it came from the stopped container."""
    with spawned(*_argv0_title()) as bare:
        wait_for(lambda: "VLLM::Worker_TP0" in _cmdline(bare.pid)[0], 10, message="exec -a")
        (orphan,) = [o for o in find_orphans(OTHER_ID, running_ids=[]) if o.pid == bare.pid]
        assert orphan.reason == "vllm_title"
        (result,) = kill_orphans([orphan], grace_s=0.5, container_id=OTHER_ID)
        assert result.outcome == "refused"
        assert "no proof" in result.detail
        assert bare.poll() is None


def test_gpu_device_holder_is_found(tmp_path: Path) -> None:
    """A process holding a file named by the device globs is reported as gpu_device (no GPU on this host)."""
    dev = tmp_path / f"nvidia{uuid.uuid4().hex[:6]}"
    dev.write_bytes(b"")
    holder = "import sys; f = open(sys.argv[1]); print('ready', flush=True); sys.stdin.read()"
    with spawned(sys.executable, "-c", holder, str(dev), ready_line=True) as proc:
        found = _by_pid(find_orphans(OTHER_ID, running_ids=[], device_globs=[str(tmp_path / "nvidia*")]))
        assert found[proc.pid].reason == "gpu_device"
        assert proc.pid not in _by_pid(
            find_orphans(OTHER_ID, running_ids=[], include_gpu_holders=False, device_globs=[str(dev)])
        )

"""A hung Docker engine (dockerd frozen with SIGSTOP: it accepts connections and never answers) must not
freeze the daemon: the control socket answers and systemd hears READY at once, status says Docker is not
answering, and the running model container is adopted once the engine thaws."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.adapters.control.client import ControlClient
from supervisor.core.errors import ControlError
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.exclusive]  # freezes the shared dockerd


def _dockerd_pids() -> list[int]:
    out = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


@contextlib.contextmanager
def frozen_dockerd() -> Iterator[None]:
    """dockerd stopped with SIGSTOP for the duration of the block; always continued afterwards."""
    pids = _dockerd_pids()
    if not pids:
        pytest.skip("dockerd is not a process of this machine")
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_hung_docker_engine_does_not_freeze_the_daemon(world: World, tmp_path: Path) -> None:
    """With dockerd frozen, a new daemon sends READY and answers status while the engine is still frozen
    (every call within the client's timeout), shows "docker: not answering", and adopts the same container
    when the engine thaws. (The latencies are printed, not asserted: timings belong in bench/.)"""
    world.profile()
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    assert d.terminate() == 0  # the model keeps running
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(3.0)
    with contextlib.closing(notify), frozen_dockerd():
        launched = time.monotonic()
        d.start(wait=False, extra_env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        ready = notify.recv(4096).decode()
        ready_after = time.monotonic() - launched
        assert "READY=1" in ready  # recv's 3 s timeout: READY came while dockerd was frozen
        client = ControlClient(d.socket, timeout=5)

        def answers() -> dict[str, object] | None:
            try:
                return client.call("status")
            except ControlError:
                return None

        first = wait_for(answers, 10, interval=0.05, message="the daemon's first status answer")
        answered_after = time.monotonic() - launched
        assert first["ok"] is True
        slowest = 0.0
        docker_state = None
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            reply = client.call("status")
            slowest = max(slowest, time.monotonic() - t0)
            docker_state = reply["data"]["daemon"]["docker"]["state"]
            # nothing is decided without Docker: the state is the recorded one, marked unobserved
            assert all(p["observed"] is False for p in reply["data"]["profiles"])
            if docker_state == "not answering":
                break
            time.sleep(0.2)
        print(f"READY {ready_after:.2f} s, status {answered_after:.2f} s after launch, slowest {slowest:.3f}")
        assert docker_state == "not answering"  # every call above answered within the client's 5 s
    st = d.wait_state("p", "RUNNING", 90, adopted=True, observed=True)
    assert st["container_id"] == cid
    assert d.status("p")["state"] == "RUNNING"
    assert d.call("status")["data"]["daemon"]["docker"]["state"] == "answering" or wait_for(
        lambda: d.call("status")["data"]["daemon"]["docker"]["state"] == "answering", 15
    )

"""Disturb the machine's dockerd (full benchmark runs only: it is shared with everyone's tests).

``restart_dockerd()`` stops dockerd with SIGTERM and starts it again with the same command line (as
scripts/setup starts it: ``setsid nohup dockerd >> LOG``), a stand-in for a host reboot as seen by Docker.
``hung_dockerd(seconds)`` SIGSTOPs it and always SIGCONTs it (a timer at <= 20 s, and ``finally``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tests.harness import wait_for

PID_FILE = Path("/var/run/docker.pid")
LOG = Path(os.environ.get("VSUP_DOCKERD_LOG", "/var/log/vllm-supervisor-dockerd.log"))
MAX_HANG_S = 20.0


def warn(what: str) -> None:
    print(
        f"WARNING: {what} - the machine's dockerd is shared; other tests may see errors now", file=sys.stderr
    )


def dockerd_pid() -> int:
    return int(PID_FILE.read_text().strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.lower()
    return ""


def docker_answers() -> bool:
    out = subprocess.run(
        ["docker", "info", "--format", "{{.ID}}"], capture_output=True, timeout=20, check=False
    )
    return out.returncode == 0


def restart_dockerd(timeout: float = 120) -> float:
    """SIGTERM dockerd, wait for it to exit, start it again; returns the wall time of the SIGTERM."""
    warn("restarting dockerd")
    pid = dockerd_pid()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    t0 = time.time()
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not _alive(pid), timeout, interval=0.2, message=f"dockerd {pid} to exit")
    with LOG.open("ab") as log:
        subprocess.Popen(
            [a.decode() for a in argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    wait_for(docker_answers, timeout, interval=0.5, message="dockerd to answer again")
    return t0


@contextlib.contextmanager
def hung_dockerd(seconds: float) -> Iterator[float]:
    """dockerd SIGSTOPped, resumed after the block or after ``seconds`` (<= 20) whichever is first.

    Yields the wall time of the SIGSTOP. A timer thread sends SIGCONT at the limit even if the block hangs.
    """
    seconds = min(seconds, MAX_HANG_S)
    warn(f"freezing dockerd for at most {seconds:g} s")
    pid = dockerd_pid()
    resume = threading.Timer(seconds, lambda: os.kill(pid, signal.SIGCONT))
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    resume.start()
    try:
        yield t0
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)

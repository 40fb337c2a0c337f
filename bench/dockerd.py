"""Disturb the machine's dockerd (full benchmark runs only: it is shared with everyone's tests).

``restart_dockerd()`` stops dockerd with SIGTERM and starts it again with the same command line (as
scripts/setup starts it: ``setsid nohup dockerd >> LOG``), a stand-in for a host reboot as seen by Docker.
``hung_dockerd(seconds)`` SIGSTOPs it and always SIGCONTs it (a timer at <= 20 s, and ``finally``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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


def restart_dockerd(
    timeout: float = 120,
    *,
    sig: signal.Signals = signal.SIGTERM,
    while_down: Callable[[], object] | None = None,
) -> float:
    """Send dockerd ``sig`` (SIGTERM: a restart, it stops every container on its way down; SIGKILL: a
    crash, its containers run on and the dockerd started again stops them), wait for it to exit, call
    ``while_down`` (a test waits there for what it must see while Docker is away), start it again; returns
    the wall time of the signal."""
    warn(f"{'crashing' if sig == signal.SIGKILL else 'restarting'} dockerd")
    pid = dockerd_pid()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    t0 = time.time()
    try:
        os.kill(pid, sig)
        wait_for(lambda: not _alive(pid), timeout, interval=0.2, message=f"dockerd {pid} to exit")
        if while_down is not None:
            while_down()
    finally:
        _start_dockerd(argv, timeout)
    return t0


def _drop_stale_pid_file() -> None:
    """dockerd refuses to start while its pid file names a process that exists ("pid file found"): a
    killed one not reaped yet (a zombie) or one that exited before answering leaves it behind."""
    with contextlib.suppress(OSError, ValueError):
        if not _alive(dockerd_pid()):
            PID_FILE.unlink()


def _answers_or_exited(proc: subprocess.Popen[bytes]) -> str | None:
    if docker_answers():
        return "answers"
    return "exited" if proc.poll() is not None else None


#: Starts of dockerd tried before giving up (systemd's Restart= does the same in the field).
START_ATTEMPTS = 3


def _start_dockerd(argv: list[bytes], timeout: float) -> None:
    """Start dockerd with ``argv`` (unless one runs already) and wait until it answers; started again if it
    exits first. After a crash with containers running, a new dockerd may give up waiting for its
    containerd ("timeout waiting for containerd to start", seen here) while that one re-attaches the
    running containers' shims; the next start finds it ready."""
    with contextlib.suppress(OSError, ValueError):
        if _alive(dockerd_pid()) and docker_answers():
            return
    deadline = time.monotonic() + timeout
    for attempt in range(1, START_ATTEMPTS + 1):
        _drop_stale_pid_file()
        with LOG.open("ab") as log:
            proc = subprocess.Popen(
                [a.decode() for a in argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        outcome = wait_for(
            functools.partial(_answers_or_exited, proc),
            max(1.0, deadline - time.monotonic()),
            interval=0.5,
            message="dockerd to answer again",
        )
        if outcome == "answers":
            return
        warn(f"dockerd exited before answering (start {attempt} of {START_ATTEMPTS}), see {LOG}")
    raise RuntimeError(f"dockerd did not come back after {START_ATTEMPTS} starts; see {LOG}")


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

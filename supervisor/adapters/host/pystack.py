"""Where a container's engine hung: its engine-core process found in the container's cgroup and its Python
stack read from the host with ``py-spy dump --pid`` (as root with CAP_SYS_PTRACE; PyPI ``py-spy``, a
dependency of the daemon), a few samples over about a second (docs/vllm-facts.md "A hang that burns a
core"). Bounded: every dump has the time left of the budget. Never raises: a box without py-spy or the
capability gets a StackRead whose ``error`` says why (the parsing is core/vllm/pystack.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from supervisor.adapters.host.cputime import ROOT, _cid, _dirs, _read
from supervisor.core.probe_events import StackRead
from supervisor.core.vllm.pystack import summarize

#: vLLM V1 names its engine-core process so (setproctitle: ``VLLM::EngineCore``).
ENGINE_TITLE = "EngineCore"
#: Samples are this far apart at most (fewer when the budget is short).
GAP_S = 0.6
CLK = os.sysconf("SC_CLK_TCK")


def py_spy_path() -> str | None:
    """The py-spy executable: beside the daemon's interpreter (its venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def container_pids(container_id: str, root: Path = ROOT) -> list[int] | None:
    """Host pids of the container's processes (its cgroup's ``cgroup.procs``; None: not found)."""
    cid = _cid(container_id)
    if cid is None:
        return None
    for d, _v2 in _dirs(root, cid, ("cpu", "cpu,cpuacct", "cpuacct", "pids", "memory")):
        text = _read(f"{d}/cgroup.procs")
        if text is not None:
            return [int(t) for t in text.split() if t.isdigit()]
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return -1


def engine_pid(container_id: str, root: Path = ROOT) -> tuple[int | None, str | None]:
    """The host pid of the container's engine core: the process titled ``VLLM::EngineCore``, else (an
    engine in the API-server process) the container's process with the most CPU time. (pid, why not)."""
    pids = container_pids(container_id, root)
    if pids is None:
        return None, "the container's cgroup was not found (gone?)"
    if not pids:
        return None, "the container has no process"
    titled = [p for p in pids if ENGINE_TITLE in _cmdline(p)]
    if titled:
        return titled[0], None
    return max(pids, key=_cpu_ticks), None


def _dump(exe: str, pid: int, timeout: float) -> tuple[str | None, str | None]:
    """One ``py-spy dump``: (text, None) or (None, why not)."""
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=max(0.2, timeout),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"py-spy did not answer within {timeout:.1f} s"
    except OSError as exc:
        return None, f"py-spy could not run: {exc.strerror or exc}"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()
        why = tail[-1][:200] if tail else f"exit {done.returncode}"
        if "ermission" in why or "ptrace" in why.lower():
            why += " (reading another process needs root with CAP_SYS_PTRACE)"
        return None, f"py-spy failed: {why}"
    return done.stdout, None


def read_stack(
    container_id: str,
    budget_s: float,
    samples: int = 3,
    purpose: str = "stuck",
    *,
    exe: str | None = None,
    root: Path = ROOT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> StackRead:
    """Up to ``samples`` dumps of the container's engine core within ``budget_s`` seconds."""
    start = clock()
    exe = exe or py_spy_path()
    if exe is None:
        return StackRead(container_id, error="py-spy is not installed", purpose=purpose)
    pid, why = engine_pid(container_id, root)
    if pid is None:
        return StackRead(container_id, error=why, purpose=purpose)
    dumps: list[str] = []
    error: str | None = None
    for i in range(max(1, samples)):
        left = budget_s - (clock() - start)
        if left <= 0.1:
            break
        text, error = _dump(exe, pid, left)
        if text is None:
            break
        dumps.append(text)
        gap = min(GAP_S, (budget_s - (clock() - start)) / 3)
        if i + 1 < samples and gap > 0:
            sleep(gap)
    if not dumps:
        return StackRead(container_id, error=error or "no time left to read it", pid=pid, purpose=purpose)
    return summarize(container_id, dumps, pid, purpose)

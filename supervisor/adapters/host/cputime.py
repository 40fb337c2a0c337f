"""A container's CPU time and block IO from its cgroup, read from the host's ``/sys/fs/cgroup``: CPU
(v1 ``cpuacct.usage``, v2 ``cpu.stat usage_usec``) and bytes read + written (v1
``blkio.throttle.io_service_bytes``, v2 ``io.stat rbytes/wbytes``). The forward-progress signals that
move during a long prefill, when no ``/metrics`` counter does (docs/vllm-facts.md "Forward progress"),
and during a load whose log is silent (docs/state-machine.md "Load activity"). None when not found (the
daemon then judges by the counters and the log alone).

The paths are plain strings, not ``pathlib`` paths: Python 3.11's ``pathlib`` (Debian 12's Python) interns
every part of a path it builds, so ``Path("/proc") / tid`` made each thread and container id read every
probe round an interned string, dropped from CPython's interned-strings table when it died; that churn
filled the table's free slots until it was rebuilt twice as big, a multi-MiB block freed and allocated again
(the soak that found it: bench/results/README.md)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PROC = Path("/proc")


def _dirs(root: str | Path, cid: str, v1_controllers: tuple[str, ...]) -> list[tuple[str, bool]]:
    """(directory, is v2) of the container's cgroup for the drivers Docker uses: cgroupfs and systemd."""
    base = os.fspath(root)
    subs = (f"docker/{cid}", f"system.slice/docker-{cid}.scope")
    v1 = [(f"{base}/{c}/{sub}", False) for c in v1_controllers for sub in subs]
    return v1 + [(f"{base}/{sub}", True) for sub in reversed(subs)]


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _cid(container_id: str | None) -> str | None:
    """The id if it can name a cgroup directory (no path tricks), else None."""
    ok = container_id and "/" not in container_id and not container_id.startswith(".")
    return container_id if ok else None


def container_cpu_s(container_id: str | None, root: Path = ROOT) -> float | None:
    """CPU seconds the container's processes used so far (None: unknown container or no cgroup file)."""
    cid = _cid(container_id)
    if cid is None:
        return None
    for d, v2 in _dirs(root, cid, ("cpuacct", "cpu,cpuacct")):
        text = _read(f"{d}/{'cpu.stat' if v2 else 'cpuacct.usage'}")
        if text is None:
            continue
        try:
            if not v2:
                return int(text.strip()) / 1e9
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except ValueError:
            return None
    return None


def container_io_bytes(container_id: str | None, root: Path = ROOT) -> int | None:
    """Bytes the container's processes read from and wrote to block devices so far (None: unknown
    container or no cgroup file). Page-cache hits are not block IO: a load served from the cache shows
    none (its CPU time moves instead)."""
    cid = _cid(container_id)
    if cid is None:
        return None
    for d, v2 in _dirs(root, cid, ("blkio",)):
        text = _read(f"{d}/{'io.stat' if v2 else 'blkio.throttle.io_service_bytes'}")
        if text is None:
            continue
        total = 0
        try:
            for line in text.splitlines():
                fields = line.split()
                if v2:  # "8:0 rbytes=1 wbytes=2 rios=3 ..."
                    for f in fields[1:]:
                        key, _, value = f.partition("=")
                        total += int(value) if key in ("rbytes", "wbytes") else 0
                elif len(fields) == 3 and fields[1] in ("Read", "Write"):  # "8:0 Read 4096"
                    total += int(fields[2])
        except ValueError:
            return None
        return total
    return None


def _threads(root: str | Path, cid: str) -> list[str] | None:
    """Thread ids of the container's cgroup (v1 ``tasks``, v2 ``cgroup.threads``; None: not found)."""
    for d, v2 in _dirs(root, cid, ("cpu", "cpu,cpuacct", "cpuacct")):
        text = _read(f"{d}/{'cgroup.threads' if v2 else 'tasks'}")
        if text is not None:
            return [t for t in text.split() if t.isdigit()]
    return None


def _schedstat(proc: str, tid: str) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one) of a thread so far (``/proc/<tid>/schedstat``)."""
    fields = (_read(f"{proc}/{tid}/schedstat") or "").split()
    if len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return int(fields[0]), int(fields[1])


class ThreadDemand:
    """The largest share of the time between two reads that any one of a container's threads was runnable
    (on a CPU, or waiting on a run queue for one): about 1 for a thread computing, starved or not; a few
    percent for the many threads that only poll; 0 for a stopped or blocked one.

    The container's CPU time alone cannot tell a starved engine from a stopped one: with the box's CPUs
    taken by other containers, a real vLLM prefill got 0.1-0.4 cores (under the 0.2-core busy bound) while
    its compute threads were runnable all the time (docs/vllm-facts.md "Forward progress under CPU
    starvation"). A sum over threads would not do either: the idle real server's 16 gloo polling threads
    wait 0.1-2 s a second between them when the CPUs are contended, engine stopped or not.

    Stateful (the previous read per thread); one instance per profile, read once per probe round. A thread
    born since the last read counts from zero (its whole life is in the span). None on the first read of a
    container, when its cgroup is not found, or when its threads are not visible from this pid namespace."""

    def __init__(self, root: Path = ROOT, proc: Path = PROC) -> None:
        self._root, self._proc = os.fspath(root), os.fspath(proc)
        self._lock = threading.Lock()  # a load sample and a probe round may overlap at RUNNING
        self._cid: str | None = None
        self._at: float | None = None
        self._last: dict[str, int] = {}

    def read(self, container_id: str | None, now: float) -> float | None:
        with self._lock:
            return self._read(container_id, now)

    def _read(self, container_id: str | None, now: float) -> float | None:
        cid = _cid(container_id)
        tids = _threads(self._root, cid) if cid is not None else None
        cur: dict[str, int] = {}
        for tid in tids or ():
            st = _schedstat(self._proc, tid)
            if st is not None:
                cur[tid] = st[0] + st[1]
        if tids and not cur:
            cid = None  # another pid namespace: its thread ids name nothing here
        same, at, prev = cid is not None and cid == self._cid, self._at, self._last
        self._cid, self._at, self._last = cid, now, cur
        if not same or at is None or now <= at:
            return None
        span_ns = (now - at) * 1e9
        shares = (max(0, ns - prev.get(tid, 0)) / span_ns for tid, ns in cur.items())
        return round(max(shares, default=0.0), 3)

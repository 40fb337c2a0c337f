"""Processes that outlived a profile's container, and a careful way to end them.

After a container stops, three kinds of process may still hold memory (29 GB each were seen):
``cgroup``: still in the container's cgroup (``/proc/PID/cgroup`` names the container id, with the
cgroupfs driver ``/docker/<id>``, with systemd ``/system.slice/docker-<id>.scope``);
``vllm_title``: a process titled ``VLLM::...`` (``VLLM::Worker_TP0``, ``VLLM::EngineCore``; the
kernel's comm is cut to 15 characters, so the command line is checked too) that belongs to no
running container; ``gpu_device``: a process holding a GPU device file (``/dev/nvidia*``,
``/dev/nvgpu/*``, ``/dev/nvmap``, ``/dev/dri/*``) outside every running container (best effort; known
system users such as nvidia-persistenced or Xorg are never reported).

Never reported and never killed: pid 1, this process and its ancestors, kernel threads, processes of
a running container. Only a process *proven* to come from the stopped container is ever signalled: its
cgroup names that container (``cgroup``). A ``vllm_title`` or ``gpu_device`` process may be another
user's bare-metal vLLM: it is reported, never touched. :func:`kill_orphans` re-checks each pid (same start
time, still in that container's cgroup) before it signals: SIGTERM, ``grace_s`` to exit, then SIGKILL.
"""

from __future__ import annotations

import glob
import os
import signal
import stat
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import psutil

from supervisor.core.host.attribution import PidLookup, container_id_in

GPU_DEVICE_GLOBS = ("/dev/nvidia*", "/dev/nvgpu/*", "/dev/nvgpu/*/*", "/dev/nvmap", "/dev/dri/*")
#: Processes that legitimately hold GPU device files on a host; never reported as orphans.
SYSTEM_GPU_USERS = frozenset(
    {"nvidia-persistenced", "nvidia-powerd", "nvargus-daemon", "Xorg", "Xwayland", "gnome-shell",
     "kwin_wayland", "sddm-greeter", "gdm-x-session", "nvidia-smi", "dcgm", "nv-hostengine"}
)  # fmt: skip
VLLM_TITLE_PREFIX = "VLLM::"
KILL_WAIT_S = 5.0  # after SIGKILL; a process in uninterruptible sleep (D state) may take long


@dataclass(frozen=True)
class Orphan:
    """A process that outlived its container (``reason``: cgroup, vllm_title or gpu_device)."""

    pid: int
    name: str
    rss_bytes: int
    reason: str
    create_time: float  # identifies the process across pid reuse
    container_id: str | None  # the container id in its cgroup, if any
    cmdline: str


@dataclass(frozen=True)
class KillResult:
    """``outcome``: terminated (SIGTERM), killed (SIGKILL), gone (already), refused, survived, failed."""

    pid: int
    name: str
    outcome: str
    detail: str = ""


def container_of(pid: int) -> str | None:
    """The 64-hex container id in ``/proc/PID/cgroup`` (the innermost one named: :func:`container_id_in`),
    or None."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            return container_id_in(fh.read())
    except OSError:
        return None


def lookup_pid(pid: int | None, cgroup: str | None = None) -> PidLookup | None:
    """Whether ``pid`` lives and the container id in its cgroup (None: no pid). ``cgroup``: the victim's
    cgroup as the OOM killer printed it; it names the container even after the process was reaped."""
    if pid is None:
        return None
    if cgroup is not None:
        return PidLookup(True, container_id_in(cgroup))
    alive = os.path.exists(f"/proc/{pid}")
    return PidLookup(alive, container_of(pid) if alive else None)


def _same(full_id: str | None, given: str) -> bool:
    """Whether ``given`` (a full id or a prefix of >= 12 characters) names ``full_id``."""
    g = given.strip().lower()
    return full_id is not None and len(g) >= 12 and full_id.startswith(g)


def _protected() -> set[int]:
    """pid 0, pid 1, this process and its ancestors."""
    pids = {0, 1, os.getpid()}
    try:
        for parent in psutil.Process().parents():
            pids.add(parent.pid)
    except psutil.Error:
        pass
    return pids


def _vllm_title(name: str, cmdline: list[str]) -> bool:
    return name.startswith(VLLM_TITLE_PREFIX) or bool(cmdline and cmdline[0].startswith(VLLM_TITLE_PREFIX))


def _device_keys(globs: Iterable[str]) -> tuple[set[str], set[int], set[tuple[int, int]]]:
    """Basenames, char-device numbers and (dev, ino) of the device files the globs name on this host."""
    names: set[str] = set()
    rdevs: set[int] = set()
    files: set[tuple[int, int]] = set()
    for pattern in globs:
        for path in glob.glob(pattern):
            try:
                st = os.stat(path)
            except OSError:
                continue
            names.add(os.path.basename(path))
            if stat.S_ISCHR(st.st_mode):
                rdevs.add(st.st_rdev)
            elif stat.S_ISREG(st.st_mode):
                files.add((st.st_dev, st.st_ino))
    return names, rdevs, files


def gpu_holders(globs: Iterable[str] = GPU_DEVICE_GLOBS) -> set[int]:
    """Pids with an fd on a GPU device file (matched by device number; others' fds need root)."""
    names, rdevs, files = _device_keys(globs)
    found: set[int] = set()
    if not names:
        return found
    for pid_s in (p for p in os.listdir("/proc") if p.isdigit()):
        fd_dir = f"/proc/{pid_s}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if os.path.basename(target.removesuffix(" (deleted)")) not in names:
                    continue
                st = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if (stat.S_ISCHR(st.st_mode) and st.st_rdev in rdevs) or (st.st_dev, st.st_ino) in files:
                found.add(int(pid_s))
                break
    return found


def find_orphans(
    container_id: str,
    running_ids: Collection[str],
    *,
    include_gpu_holders: bool = True,
    device_globs: Iterable[str] = GPU_DEVICE_GLOBS,
) -> list[Orphan]:
    """Processes left over from the (stopped) container ``container_id``, sorted by pid.

    ``running_ids``: ids (full or >= 12-character prefixes) of the containers still running; their
    processes are never reported. Raises ValueError when ``container_id`` is among them.
    """
    if any(_same(r, container_id) or _same(container_id, r) for r in running_ids if len(r) >= 12):
        raise ValueError(f"container {container_id[:12]} is still running; its processes are not orphans")
    protected = _protected()
    holders = gpu_holders(device_globs) if include_gpu_holders else set()
    found: list[Orphan] = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "memory_info", "create_time", "ppid"]):
        info = proc.info
        pid = int(info["pid"])
        cmdline = list(info["cmdline"] or [])
        name = str(info["name"] or "")
        if pid in protected or (not cmdline and (pid == 2 or info["ppid"] == 2)):
            continue  # ourselves, our ancestors, init, kernel threads
        cid = container_of(pid)
        if cid is not None and _same(cid, container_id):
            reason = "cgroup"
        elif cid is not None and any(_same(cid, r) for r in running_ids):
            continue
        elif _vllm_title(name, cmdline):
            reason = "vllm_title"
        elif pid in holders and name not in SYSTEM_GPU_USERS:
            reason = "gpu_device"
        else:
            continue
        mem = info["memory_info"]
        found.append(
            Orphan(
                pid=pid,
                name=cmdline[0] if cmdline and cmdline[0].startswith(VLLM_TITLE_PREFIX) else name,
                rss_bytes=int(mem.rss) if mem is not None else 0,
                reason=reason,
                create_time=float(info["create_time"] or 0.0),
                container_id=cid,
                cmdline=" ".join(cmdline)[:300],
            )
        )
    return sorted(found, key=lambda o: o.pid)


def _check(
    o: Orphan, container_id: str, running_ids: Collection[str], protected: set[int]
) -> psutil.Process | KillResult:
    """The live process to signal, or why not."""
    if o.pid in protected:
        return KillResult(o.pid, o.name, "refused", "pid 1, this process or one of its ancestors")
    if o.reason != "cgroup" or o.container_id is None or not _same(o.container_id, container_id):
        return KillResult(
            o.pid, o.name, "refused", f"no proof it came from container {container_id[:12]} (reported only)"
        )
    try:
        proc = psutil.Process(o.pid)
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return KillResult(o.pid, o.name, "gone")
    except psutil.Error as exc:
        return KillResult(o.pid, o.name, "failed", str(exc))
    if abs(started - o.create_time) > 0.05:
        return KillResult(o.pid, o.name, "gone", "pid reused by another process")
    cid = container_of(o.pid)
    if cid is not None and any(_same(cid, r) for r in running_ids):
        return KillResult(o.pid, o.name, "refused", f"belongs to running container {cid[:12]}")
    if cid != o.container_id:
        return KillResult(o.pid, o.name, "refused", "moved to another cgroup since it was found")
    return proc


def kill_orphans(
    orphans: Iterable[Orphan], grace_s: float, *, container_id: str, running_ids: Collection[str] = ()
) -> list[KillResult]:
    """SIGTERM the orphans of ``container_id`` (those still in its cgroup), SIGKILL those alive after
    ``grace_s``; every other one is refused. One result per orphan, never raises."""
    protected = _protected()
    results: list[KillResult] = []
    targets: dict[int, tuple[psutil.Process, Orphan]] = {}
    for o in orphans:
        checked = _check(o, container_id, running_ids, protected)
        if isinstance(checked, KillResult):
            results.append(checked)
            continue
        try:
            checked.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            results.append(KillResult(o.pid, o.name, "gone"))
            continue
        except psutil.Error as exc:
            results.append(KillResult(o.pid, o.name, "failed", f"SIGTERM: {exc}"))
            continue
        targets[o.pid] = (checked, o)
    gone, alive = psutil.wait_procs([p for p, _ in targets.values()], timeout=max(grace_s, 0.0))
    results.extend(KillResult(p.pid, targets[p.pid][1].name, "terminated") for p in gone)
    for p in alive:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
        except psutil.Error as exc:
            results.append(KillResult(p.pid, targets[p.pid][1].name, "failed", f"SIGKILL: {exc}"))
            targets.pop(p.pid)
    killed, stuck = psutil.wait_procs([p for p in alive if p.pid in targets], timeout=KILL_WAIT_S)
    results.extend(KillResult(p.pid, targets[p.pid][1].name, "killed") for p in killed)
    results.extend(
        KillResult(p.pid, targets[p.pid][1].name, "survived", "still alive after SIGKILL (D state?)")
        for p in stuck
    )
    return sorted(results, key=lambda r: r.pid)

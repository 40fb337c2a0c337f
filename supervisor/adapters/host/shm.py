"""Shared-memory hygiene: remove shared-memory segments that no live process holds.

vLLM with ``--ipc host`` leaves ``psm_*`` (torch shared tensors) and ``sem.mp-*`` (multiprocessing
semaphores) in the host's /dev/shm when a worker dies hard; tmpfs pages stay allocated until the file is
removed, so memory ratchets down across restarts. A segment is *held* when some process has it open
(an fd in ``/proc/PID/fd``) or mapped (a line in ``/proc/PID/maps``). Holders are matched by device
and inode, not by path, so a container with ``--ipc host`` that sees the file under another mount is
still recognised, and a container's private /dev/shm (another tmpfs) never matches.

If some process cannot be inspected and we are not root (or ``strict``), nothing is removed: an
unknown holder could lose its segment. One file's error (EPERM, vanished meanwhile) is a warning in
the result, never an exception.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from supervisor.core.host.paths import SHM_DIR

DEFAULT_PATTERNS = ("psm_*", "sem.mp-*")
_DELETED = " (deleted)"


@dataclass(frozen=True)
class ShmRemoved:
    """A removed (or, in a dry run, removable) segment: apparent size and tmpfs memory it used."""

    name: str
    size: int
    allocated: int


@dataclass(frozen=True)
class ShmKept:
    """A matching segment left in place: held by ``pids``, or ``unverified`` (holders not knowable)."""

    name: str
    size: int
    pids: tuple[int, ...]
    reason: str  # "held" or "unverified"


@dataclass(frozen=True)
class ShmSweep:
    """What one sweep did; ``warnings`` holds per-file and per-process problems."""

    dirpath: str
    dry_run: bool
    removed: tuple[ShmRemoved, ...]
    kept: tuple[ShmKept, ...]
    warnings: tuple[str, ...]

    @property
    def freed_bytes(self) -> int:
        """tmpfs memory given back (what would be, in a dry run)."""
        return sum(r.allocated for r in self.removed)


@dataclass(frozen=True)
class _Candidate:
    name: str
    size: int
    allocated: int
    dev: int
    ino: int


def _candidates(dirpath: Path, patterns: tuple[str, ...], warnings: list[str]) -> list[_Candidate]:
    found: list[_Candidate] = []
    try:
        entries = sorted(os.scandir(dirpath), key=lambda e: e.name)
    except OSError as exc:
        warnings.append(f"cannot list {dirpath}: {exc.strerror or exc}")
        return found
    for entry in entries:
        if not any(fnmatch.fnmatchcase(entry.name, p) for p in patterns):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue  # removed meanwhile
        if not stat.S_ISREG(st.st_mode):
            warnings.append(f"{entry.name}: not a regular file, left alone")
            continue
        found.append(_Candidate(entry.name, st.st_size, st.st_blocks * 512, st.st_dev, st.st_ino))
    return found


def _scan_fds(pid: str, names: set[str], keys: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The candidate (dev, ino) a process has open; PermissionError propagates (unknown holder)."""
    held: set[tuple[int, int]] = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("/"):
            continue  # socket:[..], pipe:[..], anon_inode:..
        base = target.removesuffix(_DELETED).rsplit("/", 1)[-1]
        if base not in names:
            continue
        try:
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in keys:
            held.add((st.st_dev, st.st_ino))
    return held


def _scan_maps(pid: str, keys: set[tuple[int, int]], inodes: set[int]) -> set[tuple[int, int]]:
    """The candidate (dev, ino) a process has mapped (``maps`` columns: addr perms off dev inode path)."""
    held: set[tuple[int, int]] = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 5 or parts[4] == "0":
                continue
            try:
                ino = int(parts[4])
                if ino not in inodes:
                    continue
                major, minor = parts[3].split(":")
                key = (os.makedev(int(major, 16), int(minor, 16)), ino)
            except ValueError:
                continue
            if key in keys:
                held.add(key)
    return held


def holders(keys: set[tuple[int, int]], names: set[str]) -> tuple[dict[tuple[int, int], set[int]], list[int]]:
    """{(dev, ino): holder pids} over all processes, and the pids that could not be inspected."""
    found: dict[tuple[int, int], set[int]] = {}
    denied: list[int] = []
    inodes = {ino for _, ino in keys}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found, [-1]
    for pid in pids:
        try:
            held = _scan_fds(pid, names, keys) | _scan_maps(pid, keys, inodes)
        except PermissionError:
            denied.append(int(pid))
            continue
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ESRCH):
                continue  # exited meanwhile
            denied.append(int(pid))
            continue
        for key in held:
            found.setdefault(key, set()).add(int(pid))
    return found, denied


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"


def sweep_shm(
    dirpath: Path = SHM_DIR,
    patterns: tuple[str, ...] = DEFAULT_PATTERNS,
    dry_run: bool = False,
    *,
    strict: bool = False,
) -> ShmSweep:
    """Remove the segments matching ``patterns`` that no live process holds; report all of it.

    Not root: any process that cannot be inspected blocks every removal (its holdings are unknown).
    Root: such processes (ptrace-protected: Yama scope 3, another user namespace) are named in a
    warning and the sweep goes on, unless ``strict``.
    """
    warnings: list[str] = []
    cands = _candidates(Path(dirpath), patterns, warnings)
    removed: list[ShmRemoved] = []
    kept: list[ShmKept] = []
    if not cands:
        return ShmSweep(str(dirpath), dry_run, (), (), tuple(warnings))
    held, denied = holders({(c.dev, c.ino) for c in cands}, {c.name for c in cands})
    if denied:
        who = ", ".join(f"{pid} ({_comm(pid)})" for pid in denied[:5])
        if strict or os.geteuid() != 0:
            warnings.append(f"{len(denied)} process(es) could not be inspected ({who}): nothing removed")
            kept = [ShmKept(c.name, c.size, (), "unverified") for c in cands]
            return ShmSweep(str(dirpath), dry_run, (), tuple(kept), tuple(warnings))
        warnings.append(
            f"{len(denied)} process(es) could not be inspected even as root ({who}); swept anyway"
        )
    try:
        dir_fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        warnings.append(f"cannot open {dirpath}: {exc.strerror or exc}")
        return ShmSweep(str(dirpath), dry_run, (), (), tuple(warnings))
    try:
        for c in cands:
            pids = held.get((c.dev, c.ino))
            if pids:
                kept.append(ShmKept(c.name, c.size, tuple(sorted(pids)), "held"))
                continue
            if not dry_run:
                try:
                    os.unlink(c.name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue  # someone else removed it
                except OSError as exc:
                    warnings.append(f"{c.name}: cannot remove: {exc.strerror or exc}")
                    continue
            removed.append(ShmRemoved(c.name, c.size, c.allocated))
    finally:
        os.close(dir_fd)
    return ShmSweep(str(dirpath), dry_run, tuple(removed), tuple(kept), tuple(warnings))

"""Host adapter: /proc/meminfo, drop_caches, memory wait, boot id, load lock, /dev/shm, the kernel log.

On a unified-memory box ``/proc/meminfo`` is the truth about GPU memory too. Nothing here raises for a
missing permission where the caller can carry on (``drop_caches`` returns False and logs why); reading
the boot id or taking the lock file fails with :class:`HostError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import structlog

from supervisor.core.clock import Clock
from supervisor.core.errors import HostError
from supervisor.core.host.reserve import memory_floor_gib
from supervisor.core.log_events import cap_line
from supervisor.core.settings.daemon import HostConfig

log = structlog.get_logger(__name__)

MEMINFO = Path("/proc/meminfo")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
GIB = 1024**3
#: ``dmesg`` is given this long (a wedged kernel log must not hang the caller for ever).
DMESG_TIMEOUT_S = 10.0
#: At most this many ``/dev/kmsg`` records are read at once.
KMSG_MAX_RECORDS = 100_000


def read_meminfo(path: Path = MEMINFO) -> dict[str, int]:
    """/proc/meminfo as {field: bytes} ("kB" values converted; unit-less counts kept as is)."""
    try:
        text = path.read_text(encoding="ascii")
    except OSError as exc:
        raise HostError(f"cannot read {path}: {exc.strerror or exc}") from exc
    result: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        result[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return result


def mem_available_gib(path: Path = MEMINFO) -> float:
    """MemAvailable in GiB."""
    info = read_meminfo(path)
    if "MemAvailable" not in info:
        raise HostError(f"{path} has no MemAvailable line")
    return info["MemAvailable"] / GIB


def drop_caches(level: int = 1, *, sync_timeout_s: float = 60.0, path: Path = DROP_CACHES) -> bool:
    """``sync`` then write ``level`` to drop_caches; False (and a logged reason) when not permitted."""
    if level not in (1, 2, 3):
        raise ValueError(f"drop_caches level must be 1, 2 or 3, got {level}")
    try:
        subprocess.run(["sync"], timeout=sync_timeout_s, check=False, capture_output=True)
    except subprocess.TimeoutExpired:
        log.warning("host.sync.timeout", timeout_s=sync_timeout_s)
    except OSError as exc:
        log.warning("host.sync.failed", error=str(exc))
    if path == DROP_CACHES and os.geteuid() != 0:
        log.warning("host.drop_caches.skipped", reason="not root", euid=os.geteuid())
        return False
    try:
        with path.open("w", encoding="ascii") as f:
            f.write(f"{level}\n")
    except OSError as exc:
        log.warning("host.drop_caches.skipped", reason=exc.strerror or str(exc), path=str(path))
        return False
    log.info("host.drop_caches.done", level=level)
    return True


def start_floor_gib(hcfg: HostConfig, gmu: float | None, meminfo: Path = MEMINFO) -> float:
    """MemAvailable a start waits for: ``host.min_mem_available_gib``, or with ``auto`` the profile's
    gmu x MemTotal + ``host.reserve_gib`` (core/host/reserve.py); 0 (no wait) when MemTotal cannot be read."""
    fixed_gib = hcfg.min_mem_available_gib
    if not hcfg.min_mem_available_auto:
        return fixed_gib
    try:
        total = read_meminfo(meminfo).get("MemTotal")
    except (HostError, OSError, ValueError):
        total = None
    if total is None:
        return fixed_gib
    return round(memory_floor_gib(gmu, total / GIB, hcfg.reserve_gib), 1)


def wait_for_memory(
    min_gib: float,
    timeout_s: float,
    clock: Clock,
    poll_s: float = 1.0,
    *,
    read: Callable[[], float] = mem_available_gib,
    sleep: Callable[[float], object] = time.sleep,
) -> tuple[bool, float]:
    """Poll MemAvailable until >= ``min_gib`` or ``timeout_s`` passes; (reached, last value in GiB).

    ``sleep`` may be a stop event's ``wait`` so a shutdown interrupts the wait; with a fake clock
    tests pass ``clock.advance``. Bounded in time and in iterations.
    """
    deadline = clock.monotonic() + timeout_s
    max_polls = int(timeout_s / poll_s) + 2 if poll_s > 0 else 1
    last = read()
    for _ in range(max_polls):
        if last >= min_gib:
            return True, last
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            break
        sleep(min(poll_s, remaining))
        last = read()
    return last >= min_gib, last


def boot_time() -> float:
    """Epoch seconds of the last boot (to place kernel-log uptime stamps in time)."""
    return float(psutil.boot_time())


def boot_id(path: Path = BOOT_ID) -> str:
    """This boot's id (changes on every reboot)."""
    try:
        value = path.read_text(encoding="ascii").strip()
    except OSError as exc:
        raise HostError(f"cannot read boot id from {path}: {exc.strerror or exc}") from exc
    if not value:
        raise HostError(f"{path} is empty")
    return value


class LoadLock:
    """An flock on a host-wide file serializing model loads across daemons and profiles.

    The kernel drops the lock when the holding process dies, so a crash never leaves it stuck.
    """

    def __init__(self, path: Path, owner: str = "") -> None:
        self.path = Path(path)
        self.owner = owner
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock without blocking; True if now held by this object (also if already held)."""
        if self._fd is not None:
            return True
        try:
            self.path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            why = "it is a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise HostError(f"cannot open load lock {self.path}: {why}") from exc
        st = os.fstat(fd)
        if os.geteuid() == 0 and (st.st_uid != 0 or not stat.S_ISREG(st.st_mode)):
            os.close(fd)
            raise HostError(
                f"load lock {self.path} is owned by uid {st.st_uid} or not a regular file: someone else made "
                "it to block model starts; remove it (it belongs in a directory only root can write)"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError as exc:
            os.close(fd)
            raise HostError(f"cannot lock {self.path}: {exc.strerror or exc}") from exc
        self._fd = fd
        info = json.dumps({"pid": os.getpid(), "owner": self.owner, "since": time.time()})
        with contextlib.suppress(OSError):  # the holder note is informational only
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode() + b"\n", 0)
        return True

    def release(self) -> None:
        """Release the lock; safe to call when not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock according to the note in the file ({pid, owner, since}), if anyone wrote one."""
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        try:
            data = json.loads(text) if text else None
        except json.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None


# ---- kernel log ---------------------------------------------------------------------------------


def _read_kmsg(path: str = "/dev/kmsg") -> list[str]:
    """Every record currently in the kernel ring buffer, read non-blocking (bounded)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines: list[str] = []
    try:
        for _ in range(KMSG_MAX_RECORDS):
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break  # no more records
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the record was overwritten while we read: skip it
                raise
            if not rec:
                break
            lines.append(cap_line(rec.decode("utf-8", "replace")))
    finally:
        os.close(fd)
    return lines


def read_kernel_log() -> list[str]:
    """The host kernel log: ``dmesg`` (with a timeout), else ``/dev/kmsg``; HostError if neither works."""
    problems: list[str] = []
    try:
        proc = subprocess.run(
            ["dmesg"], capture_output=True, text=True, errors="replace", timeout=DMESG_TIMEOUT_S, check=False
        )
        if proc.returncode == 0:
            return [cap_line(line) for line in proc.stdout.splitlines()]
        problems.append(f"dmesg exited {proc.returncode}: {proc.stderr.strip()[:200]}")
    except FileNotFoundError:
        problems.append("dmesg not found")
    except subprocess.TimeoutExpired:
        problems.append(f"dmesg did not answer within {DMESG_TIMEOUT_S:g} s")
    try:
        return _read_kmsg()
    except OSError as exc:
        problems.append(f"/dev/kmsg: {exc.strerror or exc}")
    raise HostError(
        "cannot read the kernel log ("
        + "; ".join(problems)
        + "); run as root or with CAP_SYSLOG, or read it "
        "through a privileged helper container: docker run --rm --privileged <image> dmesg"
    )

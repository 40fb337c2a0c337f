"""A container's CPU time and block IO from its cgroup, read from the host's ``/sys/fs/cgroup``: CPU
(v1 ``cpuacct.usage``, v2 ``cpu.stat usage_usec``) and bytes read + written (v1
``blkio.throttle.io_service_bytes``, v2 ``io.stat rbytes/wbytes``). The forward-progress signals that
move during a long prefill, when no ``/metrics`` counter does (docs/vllm-facts.md "Forward progress"),
and during a load whose log is silent (docs/state-machine.md "Load activity"). None when not found (the
daemon then judges by the counters and the log alone)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _dirs(root: Path, cid: str, v1_controllers: tuple[str, ...]) -> list[tuple[Path, bool]]:
    """(directory, is v2) of the container's cgroup for the drivers Docker uses: cgroupfs and systemd."""
    subs = (f"docker/{cid}", f"system.slice/docker-{cid}.scope")
    v1 = [(root / c / sub, False) for c in v1_controllers for sub in subs]
    return v1 + [(root / sub, True) for sub in reversed(subs)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
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
        text = _read(d / ("cpu.stat" if v2 else "cpuacct.usage"))
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
        text = _read(d / ("io.stat" if v2 else "blkio.throttle.io_service_bytes"))
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

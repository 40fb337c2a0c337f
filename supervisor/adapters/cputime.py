"""A container's CPU time from its cgroup (v1 ``cpuacct.usage``, v2 ``cpu.stat usage_usec``), read from the
host's ``/sys/fs/cgroup``. The forward-progress signal that moves during a long prefill, when no
``/metrics`` counter does (docs/vllm-facts.md "Forward progress"). None when not found (the daemon then
judges by the counters and the longest-step bound alone)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _candidates(root: Path, cid: str) -> list[tuple[Path, str]]:
    """(file, format) for the cgroup drivers Docker uses: cgroupfs and systemd, v1 and v2."""
    v1 = [
        root / c / sub
        for c in ("cpuacct", "cpu,cpuacct")
        for sub in (f"docker/{cid}", f"system.slice/docker-{cid}.scope")
    ]
    v2 = [root / sub for sub in (f"system.slice/docker-{cid}.scope", f"docker/{cid}")]
    return [(d / "cpuacct.usage", "ns") for d in v1] + [(d / "cpu.stat", "stat") for d in v2]


def container_cpu_s(container_id: str | None, root: Path = ROOT) -> float | None:
    """CPU seconds the container's processes used so far (None: unknown container or no cgroup file)."""
    if not container_id or "/" in container_id or container_id.startswith("."):
        return None
    for path, fmt in _candidates(root, container_id):
        try:
            text = path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            continue
        try:
            if fmt == "ns":
                return int(text.strip()) / 1e9
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except ValueError:
            return None
    return None

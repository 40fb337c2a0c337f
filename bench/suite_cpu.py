"""Where a command's CPU goes (the test suite's, to decide what to make cheaper): run it and sample,
every ``--interval`` seconds, the CPU time of every Docker container (cgroup v1 ``cpuacct`` or v2
``cpu.stat``) and of every host process (``/proc/PID/stat``), then report core-seconds by kind.

    python -m bench.suite_cpu --json -- bash scripts/test

Kinds: containers by image (``real-vllm``: the base image the real vLLM runs in; ``sim``: the simulator;
``other``), host processes by command line (``daemon``, ``pytest``, ``supervisorctl``, ``dockerd``,
``containerd``, ``other``). A process or container that ends between two samples loses at most one
interval of its time, so the kinds add up to a little less than the host's busy time (``/proc/stat``),
which is reported beside them. Sampling costs about 1 % of a core at the default interval.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")
CGROUP_V1 = Path("/sys/fs/cgroup/cpuacct/docker")
CGROUP_V2 = Path("/sys/fs/cgroup/system.slice")


def host_busy_s() -> float:
    """Busy core-seconds of the host since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


def container_usage() -> dict[str, float]:
    """Container id -> CPU seconds used so far."""
    out: dict[str, float] = {}
    if CGROUP_V1.is_dir():
        for d in CGROUP_V1.iterdir():
            try:
                out[d.name] = int((d / "cpuacct.usage").read_text()) / 1e9
            except (OSError, ValueError):
                continue
        return out
    for d in CGROUP_V2.glob("docker-*.scope"):
        try:
            line = next(x for x in (d / "cpu.stat").read_text().splitlines() if x.startswith("usage_usec"))
        except (OSError, StopIteration):
            continue
        out[d.name[len("docker-") : -len(".scope")]] = int(line.split()[1]) / 1e6
    return out


def process_kind(cmdline: str) -> str:
    if "-m supervisor --config" in cmdline or "supervisor.daemon" in cmdline or "vllm-supervisor " in cmdline:
        return "daemon"
    if "supervisor.cli" in cmdline or "supervisorctl" in cmdline:
        return "supervisorctl"
    if "pytest" in cmdline or "xdist" in cmdline or "execnet" in cmdline:
        return "pytest"
    if "dockerd" in cmdline:
        return "dockerd"
    if "containerd" in cmdline or "docker-proxy" in cmdline or "runc" in cmdline:
        return "containerd"
    return "other"


def host_processes() -> dict[int, tuple[str, float]]:
    """Host pid -> (kind, CPU seconds so far) for every process outside a container."""
    out: dict[int, tuple[str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cgroup") as f:
                if "/docker" in f.read():
                    continue
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        out[int(entry.name)] = (process_kind(cmd), (int(rest[11]) + int(rest[12])) / TICK)
    return out


class Sampler:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.containers: dict[str, float] = {}
        self.first: dict[str, float] = {}
        self.kinds: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.procs: dict[int, tuple[str, float]] = {}
        self.proc_first: dict[int, float] = {}
        self.stop = threading.Event()
        self.started = False  # after the first sample: what appears is new, its time all counted

    def _kind_of(self, cid: str) -> str:
        if cid not in self.kinds:
            try:
                out = subprocess.run(
                    ["docker", "inspect", "-f", "{{.Config.Image}} {{.Name}}", cid],
                    capture_output=True,
                    text=True,
                    timeout=10,
                    check=False,
                ).stdout.split()
            except subprocess.TimeoutExpired:
                out = []
            image = out[0] if out else ""
            self.names[cid] = out[1].lstrip("/") if len(out) > 1 else cid[:12]
            kind = "sim" if "-sim" in image else "real-vllm" if "-base" in image else "other"
            self.kinds[cid] = kind if image else "unknown"
        return self.kinds[cid]

    def sample(self) -> None:
        for cid, used in container_usage().items():
            self.first.setdefault(cid, used if not self.started else 0.0)
            self.containers[cid] = max(used, self.containers.get(cid, 0.0))
            self._kind_of(cid)
        for pid, (kind, used) in host_processes().items():
            self.proc_first.setdefault(pid, used if not self.started else 0.0)
            self.procs[pid] = (kind, max(used, self.procs.get(pid, (kind, 0.0))[1]))
        self.started = True

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sample()

    def report(self) -> dict[str, float]:
        by: dict[str, float] = defaultdict(float)
        for cid, used in self.containers.items():
            by[f"container.{self.kinds.get(cid, 'unknown')}"] += used - self.first[cid]
        for pid, (kind, used) in self.procs.items():
            by[f"host.{kind}"] += used - self.proc_first[pid]
        by["containers_seen"] = float(len(self.containers))
        return {k: round(v, 1) for k, v in sorted(by.items())}

    def top(self, n: int) -> list[dict[str, Any]]:
        """The ``n`` containers that used the most CPU: name, kind, core-seconds."""
        used = {cid: u - self.first[cid] for cid, u in self.containers.items()}
        best = sorted(used, key=lambda cid: -used[cid])[:n]
        out = []
        for cid in best:
            name = self.names.get(cid, cid[:12])
            out.append({"name": name, "kind": self.kinds.get(cid), "core_s": round(used[cid], 1)})
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--top", type=int, default=30, help="list this many containers by CPU (default 30)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    if not cmd:
        ap.error("no command given (after --)")
    s = Sampler(ns.interval)
    s.sample()
    busy0, t0 = host_busy_s(), time.monotonic()
    thread = threading.Thread(target=s.run, daemon=True)
    thread.start()
    rc = subprocess.call(cmd)
    s.stop.set()
    thread.join()
    s.sample()
    result: dict[str, Any] = {
        "command": cmd,
        "exit": rc,
        "wall_s": round(time.monotonic() - t0, 1),
        "host_busy_core_s": round(host_busy_s() - busy0, 1),
        "by_kind_core_s": s.report(),
        "top_containers": s.top(ns.top),
    }
    print(json.dumps(result, indent=None if ns.json else 2), file=sys.stderr if not ns.json else sys.stdout)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())

"""Seconds from a fault until the model server answers a real generation again, per restarter.

Run: ``.venv/bin/python -m bench.compare [--quick] [--json] [--trials N] [--faults a,b] [--tools a,b]``.
Real Docker, the simulator image, five tools side by side (bench/compare_tools.py), each trial with fresh
tools and containers. Per trial every tool's server is started, the bench waits until each answers a
generation (and the daemon says RUNNING, the healthcheck says healthy), injects the fault into all of them,
then a client per tool polls a chat completion every 0.25 s: the figure is fault -> first success after the
first failure. ``None`` (JSON ``null``) = never served again within the fault's limit. The model's load time
(``VSIM_LOAD_SECONDS``; measured: container start -> ready line) is the same for every tool and reported
apart. ``container_killed`` is ``docker kill`` (Docker's API: Docker itself treats it as a manual stop);
``process_killed`` is SIGKILL to the container's main process from the host (a crash, as Docker sees it).
``--quick``: 1 trial and no dockerd restart (host_reboot_like is null with a note); full: 5 trials.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound

from bench.compare_tools import (
    AUTOHEAL_EVERY_S,
    DAEMON_TEST_BOX_CHANGES,
    HEALTH,
    SERVED,
    TOOLS,
    VARIANTS,
    Autoheal,
    DaemonTool,
    SupervisordTool,
    Tool,
    Trial,
    cleanup_dir,
    make_tools,
)
from bench.daemon_probes import parse_rfc3339, ready_line_ts
from bench.dockerd import restart_dockerd
from bench.served import Recovery, wait_serving
from tests.harness import TEST_LABEL, wait_for
from tools.images import ensure_sim_image

FAULTS = (
    "container_killed",
    "process_killed",
    "engine_died_exit_0",
    "engine_stuck",
    "oom_killed",
    "host_reboot_like",
)
#: Seconds after the fault before a tool counts as "never served again".
LIMIT_S = {
    "container_killed": 120.0,
    "process_killed": 120.0,
    "engine_died_exit_0": 120.0,
    "engine_stuck": 240.0,
    "oom_killed": 120.0,
    "host_reboot_like": 180.0,
}
OOM_LIMIT = "256m"
OOM_ALLOC_MIB = 512
LOAD_S = 10.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def bench_image() -> str:
    """The simulator image of this checkout's sources (a content-addressed tag nobody else moves)."""
    return ensure_sim_image()


def _fault_hook(tool: Tool, body: dict[str, Any]) -> None:
    r = requests.post(f"{tool.target.url}/_sim/fault", json=body, timeout=5)
    if r.status_code != 200:
        raise RuntimeError(f"{tool.target.tool}: fault hook refused {body}: {r.status_code} {r.text[:200]}")


def inject(fault: str, tool: Tool, client: Any) -> float:
    """Inflict ``fault`` on the tool's server now; the wall time it was inflicted."""
    name = tool.target.container
    if fault == "container_killed":
        t0 = time.time()
        client.containers.get(name).kill()  # SIGKILL, as `docker kill`
        return t0
    if fault == "process_killed":  # a crash: SIGKILL to the server's PID from the host, not via Docker's API
        pid = int(client.containers.get(name).attrs["State"]["Pid"])
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        return t0
    if fault == "engine_died_exit_0":
        t0 = time.time()
        _fault_hook(tool, {"kind": "die"})
        return t0
    if fault == "engine_stuck":
        t0 = time.time()
        _fault_hook(tool, {"kind": "stuck"})
        return t0
    if fault == "oom_killed":
        client.containers.get(name).update(mem_limit=OOM_LIMIT, memswap_limit=OOM_LIMIT)
        t0 = time.time()
        _fault_hook(tool, {"kind": "alloc", "mib": OOM_ALLOC_MIB})
        return t0
    raise ValueError(f"no injector for {fault!r}")


def _ready(tool: Tool, client: Any) -> bool:
    """Steady state before a fault: serving, the daemon RUNNING, the healthcheck healthy."""
    if isinstance(tool, DaemonTool):
        assert tool.proc is not None
        if tool.proc.status("sim")["state"] != "RUNNING":
            return False
    if tool.target.tool == "docker-healthcheck":
        c = client.containers.get(tool.target.container)
        if c.attrs["State"].get("Health", {}).get("Status") != "healthy":
            return False
    return True


def load_seconds(client: Any, name: str) -> float | None:
    """Container start -> `Application startup complete.` of the container's current run."""
    try:
        c = client.containers.get(name)
    except (NotFound, DockerException):
        return None
    ready = ready_line_ts(c)
    return None if ready is None else round(ready - parse_rfc3339(str(c.attrs["State"]["StartedAt"])), 2)


def sweep(client: Any, run_id: str) -> None:
    for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={run_id}"}):
        with contextlib.suppress(NotFound, DockerException):
            c.remove(force=True)


def run_trial(fault: str, image: str, load_s: float, names: tuple[str, ...]) -> dict[str, Any]:
    """One trial of one fault across the tools; per tool seconds (None = never) plus details."""
    run_id = f"bench-cmp-{uuid.uuid4().hex[:12]}"
    tmp = Path(tempfile.mkdtemp(prefix="vsup-cmp-"))
    trial = Trial(run_id, image, load_s, tmp)
    tools = make_tools(trial, names)
    heal = Autoheal(run_id) if "docker-healthcheck" in names else None
    client = docker.from_env()
    watchers: dict[str, Recovery] = {}
    out: dict[str, Any] = {"seconds": {}, "load_s": {}, "details": {}}
    try:
        for t in tools.values():
            t.up()
        if heal is not None:
            heal.start()
        for n, t in tools.items():
            wait_serving(t.target.url, t.target.key, SERVED, 60 + 3 * load_s)
            wait_for(partial(_ready, t, client), 60, interval=0.5, message=f"{n} steady")
            out["load_s"][n] = load_seconds(client, t.target.container)
        watchers = {n: Recovery(t.target.url, t.target.key, SERVED) for n, t in tools.items()}
        if fault == "host_reboot_like":
            now = time.time()
            for w in watchers.values():
                w.start(now)
            t0 = restart_dockerd()
            for w in watchers.values():
                w.t0 = t0
        else:
            order = list(tools.items())
            random.shuffle(order)
            for n, t in order:
                watchers[n].start(inject(fault, t, client))
        deadline = min(w.t0 for w in watchers.values()) + LIMIT_S[fault]
        while time.time() < deadline and not all(w.done for w in watchers.values()):
            time.sleep(0.5)  # the watchers' threads do the polling; this only waits for them or the limit
        for n, w in watchers.items():
            out["seconds"][n] = w.seconds
        _details(out["details"], tools, heal, client)
    finally:
        for w in watchers.values():
            w.stop()
        if heal is not None:
            heal.stop()
        for t in tools.values():
            try:
                t.down()
            except Exception as exc:  # noqa: BLE001 - cleanup goes on for the other tools
                log(f"cleanup of {t.target.tool} failed: {exc!r}")
        sweep(client, run_id)
        client.close()
        cleanup_dir(tmp)
    return out


def _details(details: dict[str, Any], tools: dict[str, Tool], heal: Autoheal | None, client: Any) -> None:
    for n, t in tools.items():
        if isinstance(t, DaemonTool):
            details[n] = t.events()[-40:]
        elif isinstance(t, SupervisordTool):
            details[n] = t.log_tail().splitlines()
        else:
            try:
                c = client.containers.get(t.target.container)
                st = c.attrs["State"]
                details[n] = {
                    "status": st["Status"],
                    "exit_code": st["ExitCode"],
                    "oom_killed": st["OOMKilled"],
                    "restart_count": c.attrs.get("RestartCount"),
                    "health": st.get("Health", {}).get("Status"),
                }
            except (NotFound, DockerException) as exc:
                details[n] = repr(exc)
    if heal is not None:
        details["autoheal_restarts"] = len(heal.restarts)


def median_or_none(values: list[float | None]) -> float | None:
    """Median with "never" as +infinity: None when at least half of the trials never recovered."""
    m = statistics.median_high([math.inf if v is None else v for v in values])
    return None if math.isinf(m) else round(m, 2)


def run(
    quick: bool, trials: int, faults: tuple[str, ...], names: tuple[str, ...], load_s: float
) -> dict[str, Any]:
    image = bench_image()
    result: dict[str, Any] = {
        "faults": {},
        "trials": {},
        "notes": {},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(["python -m bench.compare", *sys.argv[1:]]),
        "image": image,
        "load_seconds_configured": load_s,
        "limits_s": {f: LIMIT_S[f] for f in faults},
        "daemon_config_changes": DAEMON_TEST_BOX_CHANGES,
        "healthcheck": {**HEALTH, "autoheal_every_s": AUTOHEAL_EVERY_S, "restart_policy": "unless-stopped"},
    }
    loads: list[float] = []
    details: dict[str, list[Any]] = {}
    for fault in faults:
        if fault == "host_reboot_like" and quick:
            result["faults"][fault] = dict.fromkeys(names)
            result["notes"][fault] = "skipped in --quick: restarting the shared dockerd is for full runs only"
            log(f"{fault}: skipped (--quick)")
            continue
        per_tool: dict[str, list[float | None]] = {n: [] for n in names}
        for i in range(trials):
            log(f"{fault}: trial {i + 1}/{trials}")
            out = run_trial(fault, image, load_s, names)
            for n in names:
                per_tool[n].append(out["seconds"].get(n))
            loads += [v for v in out["load_s"].values() if v is not None]
            details.setdefault(fault, []).append(out["details"])
            log(f"{fault}: trial {i + 1}: {out['seconds']}")
        result["trials"][fault] = per_tool
        result["faults"][fault] = {n: median_or_none(v) for n, v in per_tool.items()}
    result["load_seconds_measured_median"] = round(statistics.median(loads), 2) if loads else None
    result["details"] = details
    return result


def table(result: dict[str, Any], names: tuple[str, ...]) -> str:
    """Markdown table: one row per fault, one column per tool (median seconds, or never)."""
    head = "| fault | " + " | ".join(f"`{n}`" for n in names) + " |"
    lines = [head, "|---" * (len(names) + 1) + "|"]
    for fault, cells in result["faults"].items():
        runs = result["trials"].get(fault, {})
        row = []
        for n in names:
            v = cells.get(n)
            k = sum(1 for x in runs.get(n, []) if x is not None)
            txt = "skipped" if fault in result["notes"] else ("never" if v is None else f"{v:.1f} s")
            row.append(txt if not runs else f"{txt} ({k}/{len(runs[n])})")
        lines.append(f"| `{fault}` | " + " | ".join(row) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.compare", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 trial, no dockerd restart")
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument("--trials", type=int, default=None, help="trials per fault (default 5, --quick 1)")
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--load-seconds", type=float, default=LOAD_S, help="VSIM_LOAD_SECONDS (default 10)")
    ns = p.parse_args(argv)
    ns.fault_list = tuple(f for f in ns.faults.split(",") if f)
    ns.tool_list = tuple(t for t in ns.tools.split(",") if t)
    if set(ns.fault_list) - set(FAULTS) or set(ns.tool_list) - set(TOOLS + VARIANTS):
        p.error(f"faults: {','.join(FAULTS)}; tools: {','.join(TOOLS + VARIANTS)}")
    ns.trials = ns.trials or (1 if ns.quick else 5)
    return ns


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = run(ns.quick, ns.trials, ns.fault_list, ns.tool_list, ns.load_seconds)
    except KeyboardInterrupt:
        log("interrupted; containers removed")
        return 130
    if ns.json:
        print(json.dumps(result))
    else:
        print(table(result, ns.tool_list))
        print(
            f"\nload time (same for all tools): configured {ns.load_seconds:g} s, measured median "
            f"{result['load_seconds_measured_median']} s; limits {result['limits_s']}"
        )
        for f, note in result["notes"].items():
            print(f"{f}: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

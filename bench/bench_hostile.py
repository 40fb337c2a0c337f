"""How long ``supervisorctl status`` takes while the daemon is attacked from both local doors.

Run (root: the hostile clients run as nobody): ``flock /tmp/vsup-heavy.lock .venv/bin/python -m
bench.bench_hostile [--runs N] [--idle 1000]``. One real daemon (a subprocess) supervises one simulator
profile until RUNNING, with /metrics on a free port and its control socket open to group nogroup. Then
``supervisorctl status`` (a subprocess: wall time, interpreter start included) and a raw control-socket
round trip are timed N times each, first quiet, then while ``--idle`` idle connections hold the metrics
port and 40 hostile control clients of user nobody (trickling, half-JSON, deep nesting, huge lines,
never-closing; tests/hostile.py) run. A /metrics scrape is timed under attack too. Prints a table and one
final JSON line; exits 1 when status under attack misses the target (< 1 s) or the profile left RUNNING.
The attack itself is tests/test_daemon_hostile.py (which asserts behaviour, not these times).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

from bench.daemon_world import bench_world
from bench.stats import Row, summarize, table
from supervisor.adapters.control.client import ControlClient
from tests.daemon_harness import DaemonProc, write_profile
from tests.harness import free_port, socket_dir
from tests.hostile import exposed_daemon, hostile_control, idle_connections, raise_nofile, totals
from tests.test_cli_daemon import ctl
from tools.images import ensure_sim_image

TARGET_S = 1.0


def _ctl(d: DaemonProc) -> float:
    t0 = time.perf_counter()
    r = ctl(d, "status", timeout=30)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"supervisorctl status failed: {r.stderr.strip()}")
    return took


def _round_trip(sock: Path) -> float:
    t0 = time.perf_counter()
    ControlClient(sock, timeout=30).call("status")
    return time.perf_counter() - t0


def _scrape(port: int) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        resp.read()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15, help="status runs per phase")
    ap.add_argument("--idle", type=int, default=1000, help="idle metrics connections")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (the hostile clients run as nobody)", file=sys.stderr)
        return 2
    reason = raise_nofile(args.idle + 256)
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    ensure_sim_image()
    port = free_port()
    quiet: dict[str, list[float]] = {"ctl": [], "rt": []}
    loud: dict[str, list[float]] = {"ctl": [], "rt": [], "scrape": []}
    load = os.getloadavg()
    with socket_dir() as sock_dir, bench_world() as world:
        spec = world.profile("p", api_key=False)
        work = world.tmp / "d"
        work.mkdir()
        d = exposed_daemon(work, [write_profile(work, spec, world.run_id)], sock_dir, port)
        world.daemons.append(d)
        d.start()
        d.wait_state("p", "RUNNING", 90)
        for _ in range(args.runs):
            quiet["ctl"].append(_ctl(d))
            quiet["rt"].append(_round_trip(d.socket))
        seconds = 10.0 + args.runs * 1.0
        with hostile_control(d.socket, seconds) as attack, idle_connections(port, args.idle) as idle:
            time.sleep(1.0)  # the clients are connected and holding
            for _ in range(args.runs):
                loud["ctl"].append(_ctl(d))
                loud["rt"].append(_round_trip(d.socket))
                loud["scrape"].append(_scrape(port))
            opened, dropped = len(idle.socks), idle.closed_by_server()
        state = d.status("p")["state"]
    counts = attack.counts
    ctl_loud = summarize(loud["ctl"], "s")
    rows = [
        Row("supervisorctl status, quiet", summarize(quiet["ctl"], "s"), "-", None),
        Row("control round trip, quiet", summarize([v * 1e3 for v in quiet["rt"]], "ms", 2), "-", None),
        Row(
            "supervisorctl status, attacked",
            ctl_loud,
            f"< {TARGET_S:g} s",
            ctl_loud.max is not None and ctl_loud.max < TARGET_S,
        ),
        Row("control round trip, attacked", summarize([v * 1e3 for v in loud["rt"]], "ms", 2), "-", None),
        Row("/metrics scrape, attacked", summarize([v * 1e3 for v in loud["scrape"]], "ms", 2), "-", None),
    ]
    print(f"one simulator profile ({state}); {opened} idle metrics connections ({dropped} dropped by the")
    print(f"server by the end); 40 hostile control clients as nobody: {json.dumps(counts)}")
    print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(table(rows))
    ok = bool(rows[2].met) and state == "RUNNING"
    result = {
        "quiet": quiet,
        "attacked": loud,
        "idle_opened": opened,
        "idle_dropped": dropped,
        "hostile_connected": totals(counts, "connected"),
        "hostile_busy": totals(counts, "busy"),
        "state": state,
        "load": load,
        "ok": ok,
    }
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Daemon benchmark: death noticed, ready noticed, `supervisorctl status` latency, RSS/CPU soak.

Run: ``.venv/bin/python -m bench.bench_daemon [--trials N] [--soak-seconds S]
[--only death,ready,status,soak]``.
Drives the real daemon (subprocess) against simulator containers on the real Docker engine, prints a
table (n, median, min, max per metric, with the target) and one final JSON line. Exits 1 when a target
is missed. Every container is named ``vsup-bench-*``, labelled ``vllm-supervisor.test=bench-<uuid>``
and removed at the end, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.daemon_probes import StatusTimes, Trials, measure_status, run_cycles
from bench.daemon_world import BenchWorld, bench_world
from bench.soak import SoakResult, run_soak
from bench.stats import Row, Summary, summarize, table
from tools.images import ensure_sim_image

PARTS = ("death", "ready", "status", "soak")
TARGET_NOTICE_S = 1.0
TARGET_STATUS_S = 0.300
TARGET_RSS_MIB = 60.0
TARGET_CPU_PCT = 1.0


def _row(metric: str, s: Summary, target: float | None, label: str) -> Row:
    met = None if target is None or s.median is None else s.median <= target
    return Row(metric, s, label, met)


def cycle_rows(t: Trials) -> list[Row]:
    rows: list[Row] = []
    if t.death:
        rows.append(_row("death noticed", summarize(t.death, "s"), TARGET_NOTICE_S, "<= 1 s"))
    if t.ready_log:
        rows += [
            _row("ready -> log.ready", summarize(t.ready_log, "s"), TARGET_NOTICE_S, "<= 1 s"),
            _row("ready -> RUNNING - probe", summarize(t.ready_running, "s"), TARGET_NOTICE_S, "<= 1 s"),
            _row("ready -> RUNNING (raw)", summarize(t.ready_running_raw, "s"), None, "-"),
            _row("first probe latency", summarize(t.first_probe_ms, "ms", 1), None, "-"),
        ]
    return rows


def status_rows(st: StatusTimes) -> list[Row]:
    return [
        _row("supervisorctl status --json", summarize(st.cli, "s"), TARGET_STATUS_S, "<= 0.3 s"),
        _row("control socket status", summarize(st.socket, "s", 5), None, "-"),
    ]


def one(v: float | None, unit: str) -> Summary:
    """A one-value summary (for figures that are not medians of trials)."""
    return Summary(1, v, v, v, unit)


def soak_rows(r: SoakResult) -> list[Row]:
    return [
        _row("daemon RSS", r.rss_mib, TARGET_RSS_MIB, "<= 60 MiB"),
        Row("daemon RSS max", one(r.rss_mib.max, "MiB"), "<= 60 MiB", (r.rss_mib.max or 0) <= TARGET_RSS_MIB),
        Row("daemon CPU (avg, 1 core)", one(r.cpu_pct, "%"), "<= 1 %", r.cpu_pct <= TARGET_CPU_PCT),
        Row("RSS growth last-first min", one(r.rss_growth_mib, "MiB"), "-", None),
    ]


def run(parts: set[str], trials: int, soak_seconds: float, status_n: int) -> dict[str, object]:
    ensure_sim_image()
    rows: list[Row] = []
    out: dict[str, object] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpus": os.cpu_count(),
        "load_start": [round(x, 2) for x in os.getloadavg()],
    }
    with bench_world() as world:
        if parts & {"death", "ready"}:
            print(f"death/ready: {trials} cycles", flush=True)
            t = run_cycles(world, trials, "death" in parts, "ready" in parts)
            rows += cycle_rows(t)
            out["cycles"] = {
                "death_s": t.death,
                "ready_log_s": t.ready_log,
                "ready_running_minus_probe_s": t.ready_running,
                "ready_running_raw_s": t.ready_running_raw,
                "first_probe_ms": t.first_probe_ms,
            }
        if "status" in parts:
            print(f"status: {status_n} runs", flush=True)
            rows += status_rows(measure_status(world, status_n))
        if "soak" in parts:
            rows += _soak(world, soak_seconds, out)
    print()
    print(table(rows))
    out["rows"] = {r.metric: {**r.summary.as_dict(), "target": r.target, "met": r.met} for r in rows}
    out["load_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _soak(world: BenchWorld, seconds: float, out: dict[str, object]) -> list[Row]:
    print(f"soak: {seconds:.0f} s, two profiles, probe interval 15 s", flush=True)
    r = run_soak(world, seconds)
    out["soak"] = {
        "seconds": r.seconds,
        "rss_first_min_mib": r.rss_first_min_mib,
        "rss_last_min_mib": r.rss_last_min_mib,
        "threads_max": r.threads_max,
        "end_states": r.end_states,
        "load_before": list(r.load_before),
        "load_after": list(r.load_after),
    }
    return soak_rows(r)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.bench_daemon", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5, help="death/ready cycles (default 5)")
    p.add_argument("--soak-seconds", type=float, default=600.0, help="soak duration (default 600)")
    p.add_argument("--status-runs", type=int, default=20, help="supervisorctl runs (default 20)")
    p.add_argument("--only", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)}")
    ns = p.parse_args(argv)
    parts = {x.strip() for x in ns.only.split(",") if x.strip()}
    if not parts or parts - set(PARTS):
        p.error(f"--only takes a comma list of {','.join(PARTS)}")
    if ns.trials < 1 or ns.status_runs < 1 or ns.soak_seconds < 10:
        p.error("--trials and --status-runs must be >= 1, --soak-seconds >= 10")
    ns.parts = parts
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    try:
        out = run(ns.parts, ns.trials, ns.soak_seconds, ns.status_runs)
    except KeyboardInterrupt:
        print("interrupted; containers removed", file=sys.stderr)
        return 130
    print(json.dumps(out, default=str))
    rows = out["rows"]
    assert isinstance(rows, dict)
    return 1 if any(v.get("met") is False for v in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

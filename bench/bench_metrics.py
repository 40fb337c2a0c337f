"""The Prometheus endpoint: how long a scrape takes, and whether scraping slows the daemon loop's publish.

Run: ``.venv/bin/python -m bench.bench_metrics [--profiles N] [--scrapes N] [--seconds S]``.

1. Scrape time: median/p95 of ``GET /metrics`` over real HTTP on 127.0.0.1 (and of building the text alone,
   without HTTP), for a status document of N profiles with counters, alerts and probe histograms filled.
2. Publish time: the daemon loop only builds its status dict and swaps it in under a lock (as
   ``Daemon._publish`` does); the collector reads the last published one. The median publish is measured
   with nobody scraping, then while a thread scrapes back to back (far harsher than Prometheus's 15 s).
Prints medians; exits 0 (a measurement, not a pass/fail gate).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request
from dataclasses import replace
from typing import Any

from prometheus_client import generate_latest

from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.core.profile_state import KvDraw, ProfileState
from supervisor.core.states import State

NOW = 1_790_000_000.0


def build_status(states: list[ProfileState]) -> dict[str, Any]:
    """What Daemon._publish builds each time (status_dict per profile plus the daemon's extra keys)."""
    profiles = []
    for s in states:
        d = s.status_dict(NOW)
        d["container"] = f"vllm-{s.name}"
        d["kv_pool"]["baseline_tokens"] = 1_013_816
        d["uptime_s"] = 600.0
        d["next_maintenance"] = "2026-09-24T04:00:00+02:00"
        d["base_url"] = "http://127.0.0.1:8000"
        profiles.append(d)
    return {"daemon": {"pid": 1, "version": "0.1.0", "uptime_s": 1.0, "config": "x"}, "profiles": profiles}


def ms(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=20)
    return f"median {statistics.median(values) * 1e3:.3f} ms, p95 {qs[18] * 1e3:.3f} ms (n={len(values)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--profiles", type=int, default=10)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=3.0, help="how long each publish phase runs")
    args = ap.parse_args()

    states = [
        replace(
            ProfileState.initial(f"p{i}", NOW), state=State.RUNNING, kv=KvDraw(tokens=557_599), restarts=3
        )
        for i in range(args.profiles)
    ]
    lock = threading.Lock()
    published: dict[str, Any] = {"doc": build_status(states)}

    def snapshot() -> dict[str, Any]:
        with lock:
            return dict(published["doc"])

    def publish() -> None:
        doc = build_status(states)
        with lock:
            published["doc"] = doc

    server = MetricsServer("127.0.0.1:0", snapshot)
    for s in states:
        server.observe_event(s.name, "start.ready", {"load_s": 300.0, "adopted": False})
        server.observe_event(s.name, "emergency.stop", {"reason": "engine dead: x"})
        server.observe_event(s.name, "backoff.scheduled", {})
        for kind, secs in (("health", 0.004), ("generation", 1.2)):
            for _ in range(50):
                server.observe_probe(s.name, kind, secs)
    server.observe_alert("slack", True)
    server.start()
    try:
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            size = len(resp.read())
        scrape_s: list[float] = []
        for _ in range(args.scrapes):
            t = time.perf_counter()
            with urllib.request.urlopen(server.url, timeout=10) as resp:
                resp.read()
            scrape_s.append(time.perf_counter() - t)
        render_s: list[float] = []
        for _ in range(args.scrapes):
            t = time.perf_counter()
            generate_latest(server.registry)
            render_s.append(time.perf_counter() - t)
        print(f"profiles: {args.profiles}, exposition size: {size} bytes")
        print(f"scrape over HTTP:         {ms(scrape_s)}")
        print(f"render only (no HTTP):    {ms(render_s)}")

        def publishes() -> list[float]:
            out: list[float] = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:  # back to back for a fixed time, so scrapes overlap throughout
                t = time.perf_counter()
                publish()
                out.append(time.perf_counter() - t)
            return out

        idle = publishes()
        stop = threading.Event()
        scraped = [0]

        def scraper() -> None:
            while not stop.is_set():
                with urllib.request.urlopen(server.url, timeout=10) as resp:
                    resp.read()
                scraped[0] += 1

        thread = threading.Thread(target=scraper, daemon=True)
        thread.start()
        try:
            busy = publishes()
        finally:
            stop.set()
            thread.join(30)
        print(f"publish, nobody scraping: {ms(idle)}")
        print(f"publish, scraped flat out ({scraped[0]} scrapes meanwhile): {ms(busy)}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

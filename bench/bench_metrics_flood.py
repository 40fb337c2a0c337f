"""``status`` and a scrape while 1,000 connections flood the metrics port (issue 39 item 9), no Docker:
``python -m bench.bench_metrics_flood [--runs N] [--idle 1000]``.

A daemon built by the composition root runs in-process (a fake clock, a Docker socket nobody listens on,
as tests/test_daemon_inprocess.py) with ``metrics:`` on a free port. Then ``status`` over the control socket
and a ``/metrics`` scrape are timed N times each, quiet, then while a thread keeps ``--idle`` connections
open on the metrics port (held, plus a new one whenever one is closed). Prints a table and one JSON line;
exits 1 when a status under the flood took 1 s or more or a scrape failed. (bench/bench_hostile.py is the
same attack on a real daemon process with a simulator profile; it needs the Docker lock.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.config import load_config
from supervisor.core.clock import FakeClock
from supervisor.daemon import build_daemon
from tests.harness import free_port, wait_for
from tests.test_daemon_inprocess import _config


def _flood(port: int, n: int, stop: threading.Event, opened: list[int]) -> None:
    held: list[socket.socket] = []
    while not stop.is_set():
        held = [s for s in held if s.fileno() >= 0]
        if len(held) >= n:  # keep n: replace the ones the server closed
            alive = []
            for s in held:
                try:
                    s.setblocking(False)
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                else:
                    alive.append(s)
            held = alive
            if len(held) >= n:
                stop.wait(0.05)
                continue
        with contextlib.suppress(OSError):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            opened[0] += 1
    for s in held:
        s.close()


def _timings(client: ControlClient, url: str, runs: int) -> tuple[list[float], list[float], int]:
    status, scrape, failed = [], [], 0
    for _ in range(runs):
        t = time.perf_counter()
        assert client.call("status")["ok"]
        status.append(time.perf_counter() - t)
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                r.read()
            scrape.append(time.perf_counter() - t)
        except OSError:
            failed += 1
    return status, scrape, failed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--idle", type=int, default=1000)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2 * args.idle + 200), hard))
    with tempfile.TemporaryDirectory() as tmp:
        path = _config(Path(tmp))
        port = free_port()
        path.write_text(
            path.read_text(encoding="utf-8") + f"metrics: {{listen: '127.0.0.1:{port}'}}\n", "utf-8"
        )
        config = load_config(path)
        daemon = build_daemon(config, FakeClock(), docker=DockerAdapter(base_url=f"unix://{tmp}/no.sock"))
        thread = threading.Thread(target=daemon.run, daemon=True)
        thread.start()
        stop, opened = threading.Event(), [0]
        try:
            client = ControlClient(config.socket_path, timeout=10)
            url = f"http://127.0.0.1:{port}/metrics"
            wait_for(
                lambda: daemon.parts.sources.metrics is not None and daemon.parts.sources.metrics.serving, 15
            )
            quiet = _timings(client, url, args.runs)
            flooder = threading.Thread(target=_flood, args=(port, args.idle, stop, opened), daemon=True)
            flooder.start()
            wait_for(lambda: opened[0] >= args.idle, 60, message="the flood opened")
            flooded = _timings(client, url, args.runs)
            opened_during = opened[0]
        finally:
            stop.set()
            daemon.request_stop()
            thread.join(20)
    rows = {"quiet": quiet, "flood": flooded}
    out: dict[str, object] = {"idle": args.idle, "runs": args.runs, "flood_connections_opened": opened_during}
    for name, (status, scrape, failed) in rows.items():
        out[f"{name}_status_max_s"] = round(max(status), 4)
        out[f"{name}_status_median_s"] = round(sorted(status)[len(status) // 2], 4)
        out[f"{name}_scrape_max_s"] = round(max(scrape), 4) if scrape else None
        out[f"{name}_scrapes_failed"] = failed
        print(
            f"{name:6} status max {max(status):.4f} s, scrape max {max(scrape or [0]):.4f} s, failed {failed}"
        )
    print(json.dumps(out))
    bad = max(flooded[0]) >= 1.0 or flooded[2] > 0
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How fast ``supervisorctl`` starts: ``status --json`` against a live daemon, paired with a bare interpreter.

Run: ``.venv/bin/python -m bench.bench_cli [--runs N]``. Starts the real daemon (a subprocess) with one
profile that does not autostart (no container is needed: the figure is the client's own cost), then runs,
alternately, ``python -m supervisor.cli --socket S status --json`` and ``python -c pass`` with the same
interpreter, N times each, and prints the medians, their ratio (pair by pair, then the median: the box is
noisy) and a final JSON line. Target: at most 2x a bare interpreter start. Exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.daemon_harness import DaemonProc, write_daemon_config

TARGET_RATIO = 2.0
PROFILE = """\
name: idle
autostart: false
container:
  name: vsup-bench-cli-idle
  image: busybox
  command: ["true"]
"""


def _time(argv: list[str], limit_s: float = 60.0) -> float:
    """Wall seconds from the start of ``argv`` to its exit. The wait blocks in ``waitpid`` (a timer kills a
    run past ``limit_s``): ``subprocess.run(timeout=...)`` polls instead, sleeping 0.5, 1, 2, 4 ... 32 ms
    between looks, so every figure it gave was rounded up to the next look, 31.5 or 63.5 ms here (the
    2026-12-04 figures of 64 ms against 32-35 ms were such looks, not the commands' times)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    killer = threading.Timer(limit_s, proc.kill)
    killer.start()
    try:
        proc.wait()
    finally:
        killer.cancel()
    return time.perf_counter() - t0


def measure(socket: Path, runs: int) -> dict[str, float]:
    """Median seconds of the client and of a bare interpreter, and the median of the paired ratios."""
    client = [sys.executable, "-m", "supervisor.cli", "--socket", str(socket), "status", "--json"]
    bare = [sys.executable, "-c", "pass"]
    for _ in range(3):  # warm the page cache and the daemon's first answer
        _time(client)
        _time(bare)
    a, b = [], []
    for _ in range(runs):
        a.append(_time(client))
        b.append(_time(bare))
    return {
        "client_s": round(statistics.median(a), 4),
        "bare_s": round(statistics.median(b), 4),
        "ratio": round(statistics.median(x / y for x, y in zip(a, b, strict=True)), 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_cli", description=__doc__)
    p.add_argument("--runs", type=int, default=30)
    ns = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vsup-bench-cli-") as tmp:
        d = Path(tmp)
        prof = d / "idle.yaml"
        prof.write_text(PROFILE, encoding="utf-8")
        daemon = DaemonProc(write_daemon_config(d, [prof]), d)
        daemon.start()
        try:
            daemon.wait_state("idle", "STOPPED", 30)
            result = measure(daemon.socket, ns.runs)
        finally:
            daemon.terminate()
    print(
        f"supervisorctl status --json: {result['client_s'] * 1000:.0f} ms median, bare python "
        f"{result['bare_s'] * 1000:.0f} ms, ratio {result['ratio']:.2f} (target <= {TARGET_RATIO:g})"
    )
    print(json.dumps(result))
    return 0 if result["ratio"] <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())

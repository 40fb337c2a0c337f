"""Kernel memory error -> SIGKILL latency: a labelled NV_ERR_NO_MEMORY line written to the real /dev/kmsg
while a simulator profile serves, to Docker's ``die`` event of its container.

Run (root: /dev/kmsg): ``flock /tmp/vsup-heavy.lock .venv/bin/python -m bench.bench_wedge [--trials N]``.
One daemon (policy ``host.kernel_memory_error: kill``, breaker limit 100); per trial: wait RUNNING, write
the line (wall time just before ``write``), read the ``die`` event's ``timeNano``; the daemon restarts
the profile before the next trial. Prints a table and one JSON line; exits 1 when the median misses 2 s.
Containers are labelled and force-removed at the end (bench/daemon_world.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from bench.daemon_world import bench_world
from bench.stats import Row, summarize, table
from tests.harness import wait_for
from tests.kmsg_probe import NOMEM, die_events, kmsg_writable, write_kmsg
from tools.images import ensure_sim_image

TARGET_S = 2.0


def _dies(client: Any, container: str, since: float) -> list[dict[str, Any]]:
    return wait_for(lambda: die_events(client, container, since), 30, message="die event")


def run(trials: int) -> dict[str, object]:
    ensure_sim_image()
    latencies: list[float] = []
    exit_codes: list[str] = []
    with bench_world() as world:
        spec = world.profile("wedge")
        host = {
            "drop_caches": False,
            "load_lock_path": str(world.tmp / "load.lock"),
            "memory_guard": {"enabled": False},
            "kernel_memory_error": "kill",
        }
        d = world.daemon("d", [spec], breaker_limit=100, backoff_max_s=1.0, extra={"host": host})
        for i in range(trials):
            d.wait_state("wedge", "RUNNING", 120)
            token = f"vsup_bench_wedge_{uuid.uuid4().hex}_{i}"
            t = write_kmsg(NOMEM.format(token=token))
            dies = _dies(world.client, spec.container, t)
            latencies.append(dies[0]["timeNano"] / 1e9 - t)
            exit_codes.append(dies[0]["Actor"]["Attributes"].get("exitCode", "?"))
    s = summarize(latencies, "s")
    met = s.median is not None and s.median <= TARGET_S
    print(table([Row("kmsg write -> docker die", s, "<= 2 s", met)]))
    return {"latencies_s": latencies, "exit_codes": exit_codes, "median_s": s.median, "met": met}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.bench_wedge", description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=7, help="kills (default 7)")
    ns = p.parse_args(argv)
    if not kmsg_writable():
        print("/dev/kmsg is not writable (run as root)", file=sys.stderr)
        return 2
    out = run(max(1, ns.trials))
    print(json.dumps(out))
    return 0 if out["met"] else 1


if __name__ == "__main__":
    sys.exit(main())

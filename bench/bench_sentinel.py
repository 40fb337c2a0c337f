"""The sentinel canary's own cost and variance on the REAL vLLM CPU server (docs/sentinel.md).

    flock /tmp/vsup-heavy.lock .venv/bin/python -m bench.bench_sentinel [--trials 10] [--pause-s 2]

Starts the real vLLM CPU server (tiny local model, tools/realvllm.py) in one labelled container, waits
until it serves, then sends the sentinel's canary (supervisor/adapters/vllm/canary.py, the shipped
``sentinel:`` defaults: 64 tokens, temperature 0, the fixed prompt) ``--trials`` times to the idle server,
each after checking /metrics shows no request running or waiting. Reports per canary: time to first
token, decode tokens/s, wall time, the container's CPU seconds (cgroup), and the canary's share of an
idle server's time at the default ``interval_s`` (wall time / 900 s); the decode speed's coefficient
of variation is the noise the ``decay_pct`` default must stay above. The container is force-removed at
the end, also on error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import docker

from bench.compare_real import real_server
from bench.served import wait_serving
from bench.stats import Row, summarize, table
from supervisor.adapters.host.cputime import container_cpu_s
from supervisor.adapters.vllm import probes
from supervisor.adapters.vllm.canary import CanaryAnswer, run_canary
from supervisor.config.sentinel import SentinelConfig
from supervisor.core.vllm.metrics import VllmMetrics
from tests.harness import free_port
from tools.images import ensure_base_image
from tools.realvllm import SERVED_MODEL_NAME, ensure

LABEL = "vllm-supervisor.test"
SERVE_TIMEOUT_S = 600.0


def start_real_server(client: Any, stem: str, extra_args: tuple[str, ...] = ()) -> tuple[Any, str]:
    """The real vLLM CPU server as shipped (tiny local model, ``extra_args`` after its own) in one labelled
    container, serving: (container, its URL). The caller removes the container; it is removed here if the
    server does not serve."""
    server = real_server(ensure_base_image(), ensure())
    port = free_port()
    name = f"vsup-bench-{stem}-{uuid.uuid4().hex[:8]}"
    url = f"http://127.0.0.1:{port}"
    container = client.containers.run(
        server.image,
        [*server.command, *extra_args],
        name=name,
        detach=True,
        environment=dict(server.env),
        ports={"8000/tcp": ("127.0.0.1", port)},
        labels={LABEL: f"bench-{name}"},
        **server.docker_kwargs(),
    )
    try:
        wait_serving(url, "none", SERVED_MODEL_NAME, SERVE_TIMEOUT_S)
    except BaseException:
        container.remove(force=True)
        raise
    return container, url


def shipped_canary(url: str, cfg: SentinelConfig) -> CanaryAnswer:
    """The sentinel's canary with ``cfg``'s prompt, length and timeout, no key."""
    return run_canary(
        url, None, SERVED_MODEL_NAME, prompt=cfg.prompt, max_tokens=cfg.max_tokens, timeout=cfg.timeout_s
    )


def gate(url: str) -> tuple[bool, tuple[float | None, float | None] | None]:
    """The daemon's idle check before a canary (supervisor/daemon/executor/canary.py): (open, the
    running and waiting gauges as read; None when /metrics did not answer)."""
    res, text = probes.fetch_metrics(url, 10)
    m = VllmMetrics.from_text(text) if res.ok else None
    if m is None:
        return False, None
    busy = m.requests_running is None or m.requests_running > 0 or (m.requests_waiting or 0) > 0
    return not busy, (m.requests_running, m.requests_waiting)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--pause-s", type=float, default=2.0)
    ns = ap.parse_args(argv)
    cfg = SentinelConfig()
    container, url = start_real_server(docker.from_env(), "sentinel")
    try:
        container.reload()
        ttft, tps, wall, cpu = [], [], [], []
        for _ in range(ns.trials):
            while not gate(url)[0]:
                time.sleep(0.5)
            before = container_cpu_s(container.id)
            c = shipped_canary(url, cfg)
            after = container_cpu_s(container.id)
            if not c.ok or c.ttft_ms is None or c.decode_tps is None:
                print(f"canary failed: {c.error}", file=sys.stderr)
                continue
            ttft.append(c.ttft_ms)
            tps.append(c.decode_tps)
            wall.append(c.total_ms / 1000.0)
            if before is not None and after is not None:
                cpu.append(after - before)
            time.sleep(ns.pause_s)
        cv = statistics.pstdev(tps) / statistics.mean(tps) * 100.0 if len(tps) > 1 else None
        share = [w / cfg.interval_s * 100.0 for w in wall]
        rows = [
            Row("ttft", summarize(ttft, "ms", 1), "-", None),
            Row("decode", summarize(tps, "tok/s", 2), "-", None),
            Row("canary wall", summarize(wall, "s", 2), "-", None),
            Row("canary cpu", summarize(cpu, "cpu-s", 2), "-", None),
            Row("share of idle time", summarize(share, "%", 3), "<= 1 %", bool(share) and max(share) <= 1.0),
        ]
        print(table(rows))
        load = os.getloadavg()
        print(f"decode coefficient of variation: {cv:.1f} %" if cv is not None else "decode cv: -")
        out = {"ttft_ms": ttft, "decode_tps": tps, "wall_s": wall, "cpu_s": cpu, "cv_pct": cv, "load": load}
        print(json.dumps(out))
        return 0 if share and max(share) <= 1.0 else 1
    finally:
        container.remove(force=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Two real vLLM 0.32 CPU servers started at once: vLLM's own OpenMP binding against one core each.

The suite runs two real-vLLM test groups at once (tests/conftest.py). vLLM binds its CPU worker's OpenMP
thread by itself (``VLLM_CPU_OMP_THREADS_BIND=auto``: core 0 of what it sees), so two servers computed on one
core; the suite now gives each group a core of its own (``tools.realvllm.engine_env``). Per trial and mode,
two containers of the tests' tiny model (the fork overlay on, as in the tests) are started together; each
records the seconds from its ``docker run`` to ``/health`` answering 200, then the seconds for 6 completions
of 64 tokens one after another, and the ``core ids`` its log names. Modes: ``auto`` (vLLM's binding) and
``apart`` (``VLLM_CPU_OMP_THREADS_BIND`` 0 and 1). Run under ``flock /tmp/vsup-heavy.lock`` with nothing else
on the box for a quiet figure.

    python -m bench.bench_engine_cpus [--trials 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from typing import Any

import docker
import requests

from tools.images import base_image_tag
from tools.ports import free_port
from tools.realvllm import SERVED_MODEL_NAME, engine_env, paths, server_argv, volumes

LABEL = "vllm-supervisor.test"
READY_LIMIT_S = 300.0
COMPLETIONS = 6


def _one(client: docker.DockerClient, image: str, bind: str | None, out: dict[str, Any]) -> None:
    """One server: its time to /health, its completions' time, the cores its log names (into ``out``)."""
    p = paths()
    port = free_port()
    env = engine_env({"VLLM_CPU_KVCACHE_SPACE": "1"})
    env.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    if bind is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    t0 = time.monotonic()
    ct = client.containers.run(
        image,
        server_argv(p.venv),
        name=f"vsup-bench-cpus-{uuid.uuid4().hex[:8]}",
        detach=True,
        shm_size="1g",
        ports={"8000/tcp": ("127.0.0.1", port)},
        environment=env,
        volumes=volumes(p, fork=True),
        labels={LABEL: "bench-engine-cpus"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        ready = None
        while ready is None and time.monotonic() - t0 < READY_LIMIT_S:
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    ready = time.monotonic() - t0
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        if ready is None:
            out["error"] = f"not ready within {READY_LIMIT_S:.0f} s"
            return
        t1 = time.monotonic()
        body = {"model": SERVED_MODEL_NAME, "prompt": "hello " * 150, "max_tokens": 64, "ignore_eos": True}
        for _ in range(COMPLETIONS):
            requests.post(url + "/v1/completions", json=body, timeout=300).raise_for_status()
        out["ready_s"] = round(ready, 2)
        out["completions_s"] = round(time.monotonic() - t1, 2)
        logs = ct.logs().decode(errors="replace").splitlines()
        out["cores"] = next((ln.split("core ids=")[1] for ln in logs if "core ids=" in ln), None)
    finally:
        ct.remove(force=True)


def trial(mode: str) -> list[dict[str, Any]]:
    """Two servers at once in ``mode`` (auto or apart)."""
    client = docker.from_env(timeout=120)
    image = base_image_tag()
    results: list[dict[str, Any]] = [{}, {}]
    binds = [None, None] if mode == "auto" else ["0", "1"]
    threads = [threading.Thread(target=_one, args=(client, image, binds[i], results[i])) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.bench_engine_cpus", description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--json", help="write the trials and medians to this file")
    ns = ap.parse_args(argv)
    if ns.trials < 1:
        ap.error("--trials must be at least 1")
    runs: dict[str, list[dict[str, Any]]] = {"auto": [], "apart": []}
    for _ in range(ns.trials):
        for mode in ("auto", "apart"):  # paired: the box's state drifts between trials
            runs[mode].extend(trial(mode))
    summary = {
        mode: {
            "ready_s_median": statistics.median(r["ready_s"] for r in rs if "ready_s" in r),
            "completions_s_median": statistics.median(r["completions_s"] for r in rs if "completions_s" in r),
            "errors": [r["error"] for r in rs if "error" in r],
        }
        for mode, rs in runs.items()
        if any("ready_s" in r for r in rs)
    }
    out = {"trials": runs, "summary": summary}
    text = json.dumps(out, indent=1)
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The daemon watching a CPU-starved long prefill on the real vLLM 0.32 CPU server, end to end.

Run: ``.venv/bin/python -m bench.starved_real [--tokens 4096] [--hogs 7]`` (the real vLLM venv and the
bigger model of tools/big_model.py must be built; about 4 minutes). The daemon, with the shipped probe
defaults (5 s rounds, freeze 15 s, canary 10 s), supervises the big model with
``--no-enable-chunked-prefill``; once it is RUNNING the server's container is confined to CPU 0 and
``--hogs`` containers of the base image spin on CPU 0 beside it, then a prompt of ``--tokens`` token ids is
sent. Every second the daemon's liveness verdict and signal are read. Prints one JSON line: the answer,
the seconds it took, the emergencies and failed rounds, and how many rounds read ``cpu_starved``.
The claim (docs/vllm-facts.md "Forward progress under CPU starvation"): no emergency, the prefill answered.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import docker

from bench.detect_real import send_in_thread
from bench.detect_trials import wait_running
from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, big_monolithic_spec, write_daemon_config, write_profile
from tools.images import ensure_base_image
from tools.realvllm import ensure, ensure_cached

SPIN = ["python3", "-c", "while True: pass"]


def run(tokens: int, hogs: int) -> dict[str, object]:
    venv = ensure().venv
    big = ensure_cached()
    base_image = ensure_base_image()
    client = docker.from_env(timeout=120)
    resources = Resources(client, f"starved-real-{int(time.time())}")
    tmp = Path(tempfile.mkdtemp(prefix="vsup-starved-"))
    spec = big_monolithic_spec("big", resources.name("big"), base_image, venv, big, fork=False)  # as shipped
    profile = write_profile(tmp, spec, resources.test_id)
    config = write_daemon_config(tmp, [profile], backoff_initial_s=0.5, backoff_max_s=1.0, breaker_limit=10)
    d = DaemonProc(config, tmp)
    base = f"http://127.0.0.1:{spec.port}"
    try:
        d.start()
        cid = wait_running(d, "big", None, 600)
        client.containers.get(cid).update(cpuset_cpus="0")
        for i in range(hogs):
            name = resources.name(f"hog{i}")
            resources.track(name)
            client.containers.run(
                base_image, SPIN, name=name, detach=True, labels=resources.labels, cpuset_cpus="0"
            )
        time.sleep(3)
        key = (tmp / "big.key").read_text(encoding="utf-8").strip()
        rng = random.Random(tokens)
        since, start = time.time(), time.monotonic()
        join = send_in_thread(base, key, [rng.randrange(10, 480) for _ in range(tokens)], 4, 1800)
        signals: Counter[str] = Counter()
        out: dict[str, object] = {}
        while time.monotonic() - start < 1800:
            got = join(1.0)
            live = d.status("big").get("liveness") or {}
            signals[f"{live.get('verdict')}: {live.get('signal')}"] += 1
            if got:
                out = dict(got)
                break
        took = round(time.monotonic() - start, 1)
        events = [e for e in d.events("big", n=300) if float(e["ts"]) >= since]
        return {
            "tokens": tokens,
            "hogs": hogs,
            "answer": out,
            "seconds": took,
            "emergencies": sum(e["name"] == "emergency.stop" for e in events),
            "failed_rounds": sum(e["name"] == "probe.failed" for e in events),
            "same_container": d.status("big").get("container_id") == cid,
            "verdicts_each_second": dict(signals.most_common()),
        }
    finally:
        d.close()
        resources.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.starved_real", description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hogs", type=int, default=7)
    a = p.parse_args(argv)
    result = run(a.tokens, a.hogs)
    print(json.dumps(result))
    return 0 if result["emergencies"] == 0 and result["same_container"] else 1


if __name__ == "__main__":
    sys.exit(main())

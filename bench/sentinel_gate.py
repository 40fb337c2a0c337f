"""The sentinel's idle gate on the REAL vLLM CPU server under a full batch (docs/sentinel.md "The idle gate").

    flock /tmp/vsup-heavy.lock .venv/bin/python -m bench.sentinel_gate [--asks 16] [--clients 6] [--json]

Starts the real vLLM CPU server (tiny local model, ``--max-num-seqs 2``) in one labelled container. First,
idle: ``--asks`` times, the gate the daemon's pool job applies (supervisor/daemon/executor/canary.py:
vLLM's ``num_requests_running`` and ``num_requests_waiting`` gauges both 0) and, when it opens, the
shipped canary (supervisor/adapters/vllm/canary.py, the ``sentinel:`` defaults). Then the same while
``--clients`` clients keep sending 200-token generations, so that two run and the rest wait at every
moment. Reports how often the gate opened in each phase and what the canaries it let through measured
(decode tokens/s, time to first token): a gate that opens on the full batch sends the canary into a queue,
and its decode speed reads slow. The container is force-removed at the end, also on error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import docker
import requests

from bench.bench_sentinel import gate, shipped_canary, start_real_server
from supervisor.config.sentinel import SentinelConfig
from tools.realvllm import SERVED_MODEL_NAME

SLOTS = 2
LOAD_TOKENS = 200
ASK_EVERY_S = 2.0


def ask(url: str, n: int, cfg: SentinelConfig) -> list[dict[str, Any]]:
    """``n`` rounds of the gate and, where it opens, the canary."""
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        opened, gauges = gate(url)
        row: dict[str, Any] = {"gate_open": opened, "gauges": gauges}
        if opened:
            c = shipped_canary(url, cfg)
            row |= {"ok": c.ok, "ttft_ms": c.ttft_ms, "decode_tps": c.decode_tps}
        rows.append(row)
        time.sleep(ASK_EVERY_S)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    through = [r for r in rows if r.get("ok") and r.get("decode_tps") is not None]
    return {
        "asked": len(rows),
        "gate_open": sum(bool(r["gate_open"]) for r in rows),
        "decode_tps_median": statistics.median(r["decode_tps"] for r in through) if through else None,
        "ttft_ms_median": statistics.median(r["ttft_ms"] for r in through) if through else None,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--asks", type=int, default=16, help="gate checks per phase (default 16)")
    ap.add_argument("--clients", type=int, default=6, help="clients keeping the batch full (default 6)")
    ap.add_argument("--json", action="store_true", help="print only the JSON result")
    ns = ap.parse_args(argv)
    cfg = SentinelConfig()
    container, url = start_real_server(docker.from_env(), "gate", ("--max-num-seqs", str(SLOTS)))
    stop = threading.Event()
    done = [0]

    def load() -> None:
        body = {"model": SERVED_MODEL_NAME, "prompt": "Tell me a long story.", "max_tokens": LOAD_TOKENS}
        while not stop.is_set():
            try:
                requests.post(url + "/v1/completions", json=body | {"ignore_eos": True}, timeout=120)
                done[0] += 1
            except requests.RequestException:
                stop.wait(0.5)

    try:
        idle = ask(url, ns.asks, cfg)
        clients = [threading.Thread(target=load, daemon=True) for _ in range(ns.clients)]
        for t in clients:
            t.start()
        time.sleep(5.0)  # the batch full before the first ask
        full = ask(url, ns.asks, cfg)
        stop.set()
        for t in clients:
            t.join(130)
        out = {
            "idle": summary(idle),
            "full_batch": summary(full),
            "clients": ns.clients,
            "slots": SLOTS,
            "generations_answered_under_load": done[0],
            "idle_rows": idle,
            "full_batch_rows": full,
        }
        if not ns.json:
            for phase in ("idle", "full_batch"):
                print(f"{phase}: {out[phase]}", file=sys.stderr)
        print(json.dumps(out))
        return 0
    finally:
        stop.set()
        container.remove(force=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

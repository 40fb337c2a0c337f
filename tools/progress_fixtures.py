"""Compact the samples of ``python -m tools.progress_probe OUTDIR`` into tests/fixtures/progress/*.json.

``python -m tools.progress_fixtures OUTDIR`` keeps, per scenario, the events (send, canary, sigstop ...)
and per sample: time, /health, running, waiting, KV usage, the prompt/generation/iteration counters, the
container's cgroup CPU seconds and, where recorded, its busiest thread's runnable share since the previous
sample (tests/test_liveness_fixtures.py replays them through the machine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEST = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "progress"
KEYS = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv": "vllm:kv_cache_usage_perc",
    "prompt": "vllm:prompt_tokens_total",
    "gen": "vllm:generation_tokens_total",
    "iters": "vllm:iteration_tokens_total_count",
}


def compact(doc: dict[str, Any]) -> dict[str, Any]:
    samples = []
    for s in doc["samples"]:
        m = s.get("m") or {}
        row = {"t": s["t"], "health": s["health"] if isinstance(s["health"], int) else None}
        row |= {k: m.get(v) for k, v in KEYS.items()}
        row["cpu_s"] = round(s["cg_cpu_s"], 3) if s.get("cg_cpu_s") is not None else None
        if "thread_busy" in s:  # recorded since the starvation runs (older fixtures have none)
            row["thread_busy"] = s["thread_busy"]
        samples.append(row)
    events = [{k: v for k, v in e.items() if k != "usage"} for e in doc["events"]]
    return {
        "run": doc["run"],
        "scenario": doc["scenario"],
        "argv": doc["argv"],
        "events": events,
        "samples": samples,
    }


def main(argv: list[str]) -> int:
    DEST.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(argv[1]).glob("*-*.json")):
        out = DEST / path.name
        out.write_text(json.dumps(compact(json.loads(path.read_text())), separators=(",", ":")) + "\n")
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

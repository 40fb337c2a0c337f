"""A realistic status document (the daemon's published shape) and helpers shared by the metrics tests."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from typing import Any

from supervisor import __version__
from supervisor.core.breaker import Breaker
from supervisor.core.profile_state import KvDraw, ProfileState
from supervisor.core.states import State

NOW = 1_790_000_000.0


def status_doc(
    state: State = State.RUNNING, restarts: int = 4, emergencies: int = 2, breaker_open: bool = False
) -> dict[str, Any]:
    """A status document as ``supervisorctl status --json`` prints it: one profile ``qwen``."""
    breaker = Breaker(limit=3, window_s=7200.0)
    for i in range(3 if breaker_open else 1):
        breaker = breaker.record(NOW - 60.0 * (i + 1))
    s = replace(
        ProfileState.initial("qwen", NOW - 3600.0),
        state=state,
        since=NOW - 600.0,
        container_id="3f2a9c0d1e4b",
        restarts=restarts,
        emergencies=emergencies,
        breaker=breaker,
        kv=KvDraw(tokens=557_599, max_concurrency=2.13),
        healthy_since=NOW - 500.0,
    )
    d = s.status_dict(NOW)
    # the keys the daemon's _publish adds to ProfileState.status_dict
    d["container"] = "vllm-qwen"
    d["kv_pool"]["baseline_tokens"] = 1_013_816
    d["uptime_s"] = 600.0
    d["next_maintenance"] = "2026-09-24T04:00:00+02:00"
    d["base_url"] = "http://127.0.0.1:8000"
    return {
        "daemon": {"pid": 4242, "version": __version__, "uptime_s": 3600.0, "config": "/etc/vsup.yaml"},
        "profiles": [d],
    }


def promtool(*args: str, stdin: str | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run Debian's promtool (installed by scripts/setup)."""
    return subprocess.run(
        ["promtool", *args], input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )

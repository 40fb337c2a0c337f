"""Saturation trial: a busy but healthy server under the shipped probe defaults must cause no emergency.

The simulator gets one batch slot (``VSIM_MAX_RUNNING=1``) and slow generations (``VSIM_GEN_SECONDS``);
``clients`` threads keep it full, so the daemon's liveness generation queues behind them, often longer than
the probe interval and the 30 s probe timeout, while tokens keep moving. Every emergency then is false.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bench.detect_trials import history
from tests.daemon_harness import DaemonProc, ProfileSpec

GEN_SECONDS = 8.0
CLIENTS = 6
#: Events counted over the trial.
COUNTED = (
    "probe.saturated",
    "probe.inconclusive",
    "probe.failed",
    "probe.recovered",
    "emergency.stop",
    "container.exited",
)


@dataclass(frozen=True)
class SaturationResult:
    """What one saturation trial saw."""

    seconds: float
    clients: int
    gen_seconds: float
    completions_ok: int
    completions_failed: int
    events: dict[str, int]
    end_state: str
    restarts: int
    history: list[dict[str, Any]]

    @property
    def false_emergencies(self) -> int:
        return self.events.get("emergency.stop", 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "clients": self.clients,
            "gen_seconds": self.gen_seconds,
            "completions_ok": self.completions_ok,
            "completions_failed": self.completions_failed,
            "events": self.events,
            "end_state": self.end_state,
            "restarts": self.restarts,
            "false_emergencies": self.false_emergencies,
            "history": self.history,
        }


def saturation_env() -> dict[str, str]:
    return {"VSIM_MAX_RUNNING": "1", "VSIM_GEN_SECONDS": str(GEN_SECONDS)}


class Load:
    """``clients`` threads posting completions back to back until stopped (or their deadline)."""

    def __init__(self, base_url: str, key: str, clients: int, deadline: float) -> None:
        self.url = base_url + "/v1/completions"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.deadline = deadline
        self.stop = threading.Event()
        self.ok = 0
        self.failed = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            try:
                r = requests.post(
                    self.url,
                    json={"model": "sim-model", "prompt": "x", "max_tokens": 16},
                    headers=self.headers,
                    timeout=180,
                )
                good = r.status_code == 200
            except requests.RequestException:
                good = False
            with self._lock:
                if good:
                    self.ok += 1
                else:
                    self.failed += 1
            if not good:
                self.stop.wait(1.0)  # a refused or failed request: do not spin

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(GEN_SECONDS * (len(self.threads) + 2))


def run_saturation(
    start: Callable[[list[ProfileSpec]], DaemonProc],
    spec: ProfileSpec,
    keydir: Path,
    seconds: float,
    log: Callable[[str], None],
) -> SaturationResult:
    """Start a daemon on ``spec`` (a saturation-prone simulator), load it for ``seconds``, count events."""
    d = start([spec])
    d.wait_state(spec.name, "RUNNING", 120)
    key = (keydir / f"{spec.name}.key").read_text(encoding="utf-8").strip()
    base = f"http://127.0.0.1:{spec.port}"
    since = time.time()
    t0 = time.monotonic()
    with Load(base, key, CLIENTS, t0 + seconds + 60) as load:
        for i in range(int(seconds) + 1):  # bounded: one look per second
            left = t0 + seconds - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(1.0, left))
            if d.proc is not None and d.proc.poll() is not None:
                raise AssertionError(f"daemon exited during the saturation trial:\n{d.log_tail()}")
            if i % 30 == 29:
                done = time.monotonic() - t0
                log(f"  saturation {done:4.0f}s: {load.ok} completions, {_counts(d, spec, since)}")
        loaded = time.monotonic() - t0
    # counted after the clients finished their last requests (the load tapers off meanwhile)
    counts = _counts(d, spec, since)
    st = d.status(spec.name)
    return SaturationResult(
        seconds=round(loaded, 1),
        clients=CLIENTS,
        gen_seconds=GEN_SECONDS,
        completions_ok=load.ok,
        completions_failed=load.failed,
        events=counts,
        end_state=str(st["state"]),
        restarts=int(st.get("restarts") or 0),
        history=history(d, spec.name, since),
    )


def _counts(d: DaemonProc, spec: ProfileSpec, since: float) -> dict[str, int]:
    events = d.events(spec.name, n=1000)
    c = Counter(str(e["name"]) for e in events if float(e["ts"]) >= since and e["name"] in COUNTED)
    return {k: c.get(k, 0) for k in COUNTED}

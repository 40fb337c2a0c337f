"""The real vLLM's three freeze shapes and its long prefills, for bench_detection (docs/vllm-facts.md
"Forward progress"): EngineCore SIGSTOPped while two generations run; EngineCore SIGSTOPped while idle and a
request 3 s later; the API-server process SIGSTOPped. And a long prefill (the bigger random model of
tools/big_model.py, chunked and monolithic) under the shipped probe defaults: any emergency is false.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench.detect_trials import Injected, Injector
from tests.daemon_harness import DaemonProc
from tests.harness import WaitTimeout, wait_for
from tools.realvllm import SERVED_MODEL_NAME


def _post(base: str, key: str, prompt: list[int] | str, max_tokens: int, timeout: float) -> dict[str, Any]:
    body = {"model": SERVED_MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    start = time.monotonic()
    try:
        r = requests.post(
            base + "/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )
        out: dict[str, Any] = {"status": r.status_code}
        if r.status_code == 200:
            out["usage"] = r.json().get("usage")
    except (requests.RequestException, ValueError) as exc:
        out = {"error": type(exc).__name__}
    out["s"] = round(time.monotonic() - start, 2)
    return out


def send_in_thread(
    base: str, key: str, prompt: list[int] | str, max_tokens: int, timeout: float
) -> Callable[[float], dict[str, Any]]:
    """Send a completion from a thread; returns a function that joins it (bounded) and gives the outcome."""
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(_post(base, key, prompt, max_tokens, timeout))

    th = threading.Thread(target=run, daemon=True)
    th.start()

    def join(wait: float) -> dict[str, Any]:
        th.join(wait)
        return dict(result)

    return join


def _pids(client: Any, cid: str, needle: str) -> list[int]:
    top = client.api.top(cid, ps_args="-eo pid,args")
    titles = top.get("Titles") or []
    col = titles.index("PID") if "PID" in titles else 0
    return [int(r[col]) for r in top.get("Processes") or [] if any(needle in str(c) for c in r)]


def _stopper(pid: int) -> Callable[[], None]:
    def cont() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    return cont


def _running(base: str) -> float:
    text = requests.get(base + "/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def engine_stop_busy(client: Any, base: str, key_file: Path) -> Injector:
    """Two long generations, then SIGSTOP of VLLM::EngineCore once /metrics counts them running."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        key = key_file.read_text(encoding="utf-8").strip()
        for attempt in range(4):  # bounded: generations that ended between two looks are sent again
            for _ in range(2):
                send_in_thread(base, key, "Tell me a long story.", 400, 240)  # < --max-model-len 512
            try:
                wait_for(lambda: _running(base) >= 1, 15, interval=0.05, message="generations running")
                break
            except WaitTimeout:
                if attempt == 3:
                    raise
        (pid,) = _pids(client, cid, "VLLM::EngineCore")
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        return Injected(at, undo=_stopper(pid), note="(2 generations running)")

    return inject


def engine_spin_busy(base: str, key_file: Path, trigger_dir: Path) -> Injector:
    """The test overlay's trigger armed for two running requests (tests/daemon_harness.spin_overlay_spec),
    then two long generations: the engine core's step spins on the CPU once both run (issue 35); the
    injection time is when /metrics first counts them running. Undo: the trigger goes."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        key = key_file.read_text(encoding="utf-8").strip()
        trigger = trigger_dir / "spin"
        trigger.write_text("2", encoding="utf-8")
        for _ in range(2):
            send_in_thread(base, key, "Tell me a long story.", 400, 240)  # < --max-model-len 512
        wait_for(lambda: _running(base) >= 2, 30, interval=0.05, message="two generations running")
        at = time.time()

        def undo() -> None:
            trigger.unlink(missing_ok=True)

        return Injected(at, undo=undo, note="(the step spins, 2 generations running)")

    return inject


def engine_stop_idle(client: Any, base: str, key_file: Path) -> Injector:
    """SIGSTOP of VLLM::EngineCore while idle; a request 3 s later (counted nowhere)."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        key = key_file.read_text(encoding="utf-8").strip()
        (pid,) = _pids(client, cid, "VLLM::EngineCore")
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(3.0)  # the shape: idle when frozen, then a request arrives
        send_in_thread(base, key, "Hello there.", 8, 120)
        return Injected(at, undo=_stopper(pid), note="(a request 3 s after the freeze)")

    return inject


def api_server_stop(client: Any) -> Injector:
    """SIGSTOP of the API-server process (the container's main process): /health does not answer."""

    def inject(d: DaemonProc, name: str, cid: str) -> Injected:
        pid = int(client.api.inspect_container(cid)["State"]["Pid"])
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        return Injected(at, undo=_stopper(pid), note="(/health no answer)")

    return inject


@dataclass
class PrefillTrial:
    """One long prompt sent to a RUNNING big-model server under the shipped probe defaults."""

    mode: str
    prompt_tokens: int
    outcome: dict[str, Any] = field(default_factory=dict)
    emergencies: int = 0
    failed_rounds: int = 0
    verdicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "prompt_tokens": self.prompt_tokens,
            "outcome": self.outcome,
            "false_emergencies": self.emergencies,
            "probe_failed": self.failed_rounds,
            "verdicts": sorted(set(self.verdicts)),
        }


def prefill_trial(
    d: DaemonProc, name: str, base: str, key_file: Path, mode: str, tokens: int
) -> PrefillTrial:
    """Send ``tokens`` random token ids (max_tokens 4); watch the daemon until the answer (bounded)."""
    t = PrefillTrial(mode, tokens)
    key = key_file.read_text(encoding="utf-8").strip()
    since = time.time()
    rng = random.Random(tokens)
    join = send_in_thread(base, key, [rng.randrange(10, 480) for _ in range(tokens)], 4, 900)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        out = join(1.0)
        t.verdicts.append(str((d.status(name).get("liveness") or {}).get("verdict")))
        if out:
            t.outcome = out
            break
    events = [e for e in d.events(name, n=300) if float(e["ts"]) >= since]
    t.emergencies = sum(e["name"] == "emergency.stop" for e in events)
    t.failed_rounds = sum(e["name"] == "probe.failed" for e in events)
    return t

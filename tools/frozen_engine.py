"""Measure what a frozen (SIGSTOP) and a killed (SIGKILL) engine core looks like on the real vLLM CPU server.

``python -m tools.frozen_engine OUTDIR`` starts ONE real vLLM container (the recipe of tools/realvllm.py,
which must be built: ``python -m tools.realvllm ensure``), then:

1. a baseline: /health, /v1/models, /metrics after two completions;
2. ``kill -STOP`` of the ``VLLM::EngineCore`` process, then samples with 0, 1 and 3 chat requests in flight
   (client timeout ``LONG_TIMEOUT_S``) for ``FREEZE_S`` seconds;
3. ``kill -CONT``: do the hung requests complete? samples after the thaw;
4. a second short freeze with one request whose client timeout is ``SHORT_TIMEOUT_S`` (what the client sees);
   then a third freeze in the middle of a batch of three long generations (what the gauges keep);
5. ``kill -KILL`` of the engine core: /health over time, the API server's last log lines, the exit code.

It writes ``OUTDIR/report.json`` (every sample with its time since the freeze), ``OUTDIR/container.log``
and the raw metrics texts ``OUTDIR/metrics-*.txt``. The container is removed
(and the engine thawed) in a ``finally``.
This is a measuring tool for docs/simulator.md, not a test: it takes about three minutes and two cores.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.models.containers
import requests

from tools.realvllm import READY_LINE, SERVED_MODEL_NAME, RealVllmPaths, paths, server_argv, volumes
from tools.realvllm_run import core_pids, series_sums, start_real

FREEZE_S = 80.0
LONG_TIMEOUT_S = 150.0
SHORT_TIMEOUT_S = 10.0
#: Long enough (the model allows 512) that a freeze lands while the batch runs.
LONG_TOKENS = 480
SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total")


def metric_values(text: str) -> dict[str, float]:
    """The SERIES values (summed over label sets) of a Prometheus text exposition."""
    return series_sums(text, SERIES)


@dataclass
class Server:
    """The running container and how to reach it."""

    container: docker.models.containers.Container
    url: str
    key: str
    t0: float = 0.0  # monotonic time of the current freeze (0: none yet)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def since(self) -> float:
        return round(time.monotonic() - self.t0, 2) if self.t0 else 0.0

    def get(self, path: str, timeout: float, auth: bool = False) -> dict[str, Any]:
        """Status (or error class) and latency of one GET."""
        headers = {"Authorization": f"Bearer {self.key}"} if auth else {}
        start = time.monotonic()
        try:
            resp = requests.get(self.url + path, headers=headers, timeout=timeout)
        except requests.RequestException as exc:
            return {"error": type(exc).__name__, "s": round(time.monotonic() - start, 3)}
        return {"status": resp.status_code, "s": round(time.monotonic() - start, 3), "text": resp.text}

    def sample(self, phase: str) -> dict[str, Any]:
        """One look at /health, /v1/models and /metrics; appended to ``samples``."""
        at = self.since()
        health = self.get("/health", 5)
        models = self.get("/v1/models", 5, auth=True)
        metrics = self.get("/metrics", 10)
        values = metric_values(metrics.pop("text", ""))
        health.pop("text", None)
        models.pop("text", None)
        rec = {"phase": phase, "t": at, "health": health, "models": models}
        rec |= {"metrics": metrics, "values": values}
        self.samples.append(rec)
        print(json.dumps(rec), flush=True)
        return rec

    def metrics_text(self) -> str:
        resp = requests.get(self.url + "/metrics", timeout=10)
        resp.raise_for_status()
        return resp.text


@dataclass
class Call:
    """One chat completion sent from a thread; its outcome once it ends."""

    name: str
    timeout: float
    max_tokens: int = 8
    started: float = 0.0
    outcome: dict[str, Any] = field(default_factory=dict)
    thread: threading.Thread | None = None

    def start(self, server: Server) -> Call:
        def run() -> None:
            self.started = time.monotonic()
            body = {
                "model": SERVED_MODEL_NAME,
                "messages": [{"role": "user", "content": f"Hello {self.name}"}],
                "max_tokens": self.max_tokens,
                "ignore_eos": True,
            }
            try:
                resp = requests.post(
                    server.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {server.key}"},
                    timeout=self.timeout,
                )
                usage = resp.json().get("usage", {}) if resp.status_code == 200 else {}
                result: dict[str, Any] = {"status": resp.status_code}
                result["tokens"] = usage.get("completion_tokens")
                if resp.status_code != 200:
                    result["body"] = resp.text[:300]
            except requests.RequestException as exc:
                result = {"error": type(exc).__name__}
            result["elapsed_s"] = round(time.monotonic() - self.started, 2)
            result["ended_t"] = server.since()
            self.outcome = result
            print(json.dumps({"call": self.name, **result}), flush=True)

        self.thread = threading.Thread(target=run, name=self.name, daemon=True)
        self.thread.start()
        return self

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


def start(client: docker.DockerClient, p: RealVllmPaths) -> Server:
    run = start_real(
        client,
        server_argv(p.venv),
        prefix="vsup-frozen-engine",
        label="frozen-engine-measurement",
        volumes=volumes(p),
    )
    return Server(run.container, run.url, run.key)


def wait_ready(server: Server, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        server.container.reload()
        if server.container.status == "exited":
            raise RuntimeError("real vLLM exited before ready")
        if READY_LINE in server.container.logs().decode("utf-8", "replace"):
            return time.monotonic() - started
        time.sleep(0.5)
    raise RuntimeError("real vLLM not ready in time")


def engine_core_pid(server: Server) -> int:
    """Host pid of the VLLM::EngineCore process (``docker top NAME -eo pid,args``)."""
    pid = core_pids(server.container)[0]
    if not pid:
        raise RuntimeError("no EngineCore process in the container")
    return pid


def log_lines(server: Server) -> list[str]:
    return server.container.logs().decode("utf-8", "replace").splitlines()


def sample_for(server: Server, phase: str, until_t: float, every: float) -> None:
    """Sample every ``every`` s until ``until_t`` s after the freeze (a measuring tool may pace itself)."""
    while server.since() < until_t:
        server.sample(phase)
        time.sleep(every)


def measure(server: Server, out: Path, report: dict[str, Any]) -> None:
    report["ready_s"] = round(wait_ready(server), 1)
    for i in range(2):
        Call(f"warm{i}", 120).start(server).join(120)
    deadline = time.monotonic() + 30
    while metric_values(server.metrics_text()).get("vllm:generation_tokens_total", 0) < 16:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    server.sample("baseline")
    (out / "metrics-normal.txt").write_text(server.metrics_text(), encoding="utf-8")
    report["top"] = server.container.top(ps_args="-eo pid,args")["Processes"]
    pid = engine_core_pid(server)
    report["engine_core_pid"] = pid
    lines_before = len(log_lines(server))

    os.kill(pid, signal.SIGSTOP)
    server.t0 = time.monotonic()
    report["frozen"] = True
    sample_for(server, "frozen-0", 10, 2)
    calls = [Call("r1", LONG_TIMEOUT_S).start(server)]
    sample_for(server, "frozen-1", 25, 3)
    calls += [Call("r2", LONG_TIMEOUT_S).start(server), Call("r3", LONG_TIMEOUT_S).start(server)]
    sample_for(server, "frozen-3", FREEZE_S, 4)
    (out / "metrics-frozen-3-requests.txt").write_text(server.metrics_text(), encoding="utf-8")
    report["log_while_frozen"] = log_lines(server)[lines_before:]

    os.kill(pid, signal.SIGCONT)
    report["frozen"] = False
    report["cont_t"] = server.since()
    for c in calls:
        c.join(60)
    report["calls"] = {c.name: c.outcome for c in calls}
    sample_for(server, "thawed", FREEZE_S + 12, 2)
    (out / "metrics-after-thaw.txt").write_text(server.metrics_text(), encoding="utf-8")

    # A second freeze: what a client with a short timeout sees, and what the server does with it on thaw.
    os.kill(pid, signal.SIGSTOP)
    report["frozen"] = True
    server.t0 = time.monotonic()
    short = Call("short", SHORT_TIMEOUT_S).start(server)
    short.join(SHORT_TIMEOUT_S + 10)
    server.sample("frozen-short")
    os.kill(pid, signal.SIGCONT)
    report["frozen"] = False
    report["short_call"] = short.outcome
    sample_for(server, "thawed-short", SHORT_TIMEOUT_S + 12, 2)

    # A freeze in the middle of a batch: the gauges keep the last values the engine reported.
    long_calls = [Call(f"long{i}", LONG_TIMEOUT_S, max_tokens=LONG_TOKENS).start(server) for i in range(3)]
    deadline = time.monotonic() + 30
    while metric_values(server.metrics_text()).get("vllm:num_requests_running", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the long requests never showed as running")
        time.sleep(0.02)
    os.kill(pid, signal.SIGSTOP)
    report["frozen"] = True
    server.t0 = time.monotonic()
    sample_for(server, "frozen-mid-batch", 20, 4)
    (out / "metrics-frozen-mid-batch.txt").write_text(server.metrics_text(), encoding="utf-8")
    os.kill(pid, signal.SIGCONT)
    report["frozen"] = False
    for c in long_calls:
        c.join(60)
    report["long_calls"] = {c.name: c.outcome for c in long_calls}
    sample_for(server, "thawed-mid-batch", 26, 2)

    # SIGKILL of the engine core: how the API server notices, what /health says, how the container ends.
    lines_before = len(log_lines(server))
    os.kill(pid, signal.SIGKILL)
    server.t0 = time.monotonic()
    health: list[dict[str, Any]] = []
    exit_t: float | None = None
    while server.since() < 60:
        h = server.get("/health", 2)
        h.pop("text", None)
        h["t"] = server.since()
        if not health or {k: v for k, v in h.items() if k not in ("s", "t")} != {
            k: v for k, v in health[-1].items() if k not in ("s", "t")
        }:
            health.append(h)
            print(json.dumps({"kill_health": h}), flush=True)
        server.container.reload()
        if server.container.status == "exited":
            exit_t = server.since()
            break
        time.sleep(0.2)
    server.container.reload()
    report["kill"] = {
        "health_changes": health,
        "exit_t": exit_t,
        "exit_code": server.container.attrs["State"]["ExitCode"],
        "log_after_kill": log_lines(server)[lines_before:],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tools.frozen_engine OUTDIR", file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    client = docker.from_env(timeout=120)
    server = start(client, paths())
    report: dict[str, Any] = {"frozen": False}
    try:
        measure(server, out, report)
    finally:
        if report.get("frozen") and "engine_core_pid" in report:
            with contextlib.suppress(ProcessLookupError):
                os.kill(report["engine_core_pid"], signal.SIGCONT)
        with contextlib.suppress(docker.errors.APIError):
            (out / "container.log").write_text(server.container.logs().decode("utf-8", "replace"))
        report["samples"] = server.samples
        (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
        with contextlib.suppress(docker.errors.NotFound):
            server.container.remove(force=True, v=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Measure what real vLLM's ``/metrics`` shows step by step during long prefills, saturation and freezes.

``python -m tools.progress_probe OUTDIR [PROMPT_TOKENS]`` (run under ``flock /tmp/vsup-heavy.lock``; the real
vLLM venv and ``big-model`` must be built, see tools/big_model.py) starts the real vLLM CPU server with the
bigger random model twice (chunked prefill on, then ``--no-enable-chunked-prefill``) and samples every
``EVERY_S`` seconds: /health, the progress counters of ``/metrics`` (``SERIES``), the container's cgroup CPU
time, its busiest thread's runnable share (adapters/cputime.ThreadDemand) and the EngineCore and API-server
processes' own CPU time, while it runs these scenarios:

- ``prefill``: one completion of PROMPT_TOKENS token ids (max_tokens 4), a streaming 1-token canary 5 s in;
- ``saturation`` (chunked run only): 24 concurrent completions of 64 tokens;
- ``freeze_busy``: EngineCore SIGSTOPped while two generations run (canary sent during the freeze);
- ``freeze_idle``: EngineCore SIGSTOPped while idle, a request and a canary 3 s later;
- ``freeze_api``: the API-server process SIGSTOPped;
- ``spin_busy`` (run ``spin``: the tiny model, chunked prefill on, the test overlay tools/overlays/spin on
  its ``PYTHONPATH``): two generations running, then the engine core's step spins on the CPU for 25 s
  (three ``py-spy dump``s of the EngineCore recorded as events).

``python -m tools.progress_probe OUTDIR PROMPT_TOKENS starved[:HOGS]`` runs the monolithic server only, with
HOGS (default 16) containers of the base image spinning beside it: ``prefill`` and ``freeze_busy`` on CPUs
others take (docs/vllm-facts.md "Forward progress under CPU starvation"; ``starved:12`` with 4096 tokens
recorded tests/fixtures/progress/starved-*.json).

Writes ``OUTDIR/<run>-<scenario>.json`` (the samples, times relative to the scenario's start) and a few
raw metrics texts. Containers are labelled ``vllm-supervisor.test`` and force-removed in a ``finally``.
A measuring tool for docs/vllm-facts.md "Forward progress", not a test (about 10-15 minutes on 2 cores).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from supervisor.adapters.host.cputime import ThreadDemand
from tools.realvllm import SERVED_MODEL_NAME, cache_dir, paths
from tools.realvllm_run import core_pids, series_sums, start_real

EVERY_S = 0.5
#: The test overlay whose engine-core step spins while ``<trigger dir>/spin`` exists (issue 35).
SPIN_OVERLAY = Path(__file__).resolve().parent / "overlays" / "spin"
OVERLAY_MOUNT = "/vsup-overlay"
TRIGGER_MOUNT = "/vsup-trigger"
MAX_MODEL_LEN = 16384
SERIES = (
    "vllm:iteration_tokens_total_count",
    "vllm:iteration_tokens_total_sum",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
)
CLK = os.sysconf("SC_CLK_TCK")


def values(text: str) -> dict[str, float]:
    return series_sums(text, SERIES)


def proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK


class Run:
    def __init__(
        self, client: docker.DockerClient, name: str, extra: list[str], prompt_tokens: int, spin: bool = False
    ) -> None:
        p = paths()
        self.name = name
        self.prompt_tokens = prompt_tokens  # the long prefill's
        # the spin run: the tiny model (--max-model-len 512) with the spinning-step overlay on its path
        model, mml = ("/models/tiny", 512) if spin else ("/models/big", MAX_MODEL_LEN)
        argv = [str(p.python), "-m", "vllm.entrypoints.openai.api_server", "--model", model]
        argv += ["--served-model-name", SERVED_MODEL_NAME, "--port", "8000"]
        argv += ["--max-model-len", str(mml), "--dtype", "bfloat16", "--enforce-eager", *extra]
        self.argv = argv
        volumes = {str(p.venv): {"bind": str(p.venv), "mode": "ro"}}
        env: dict[str, str] = {}
        self.trigger_dir: Path | None = None
        if spin:
            self.trigger_dir = Path(tempfile.mkdtemp(prefix="vsup-spin-"))
            volumes[str(p.model)] = {"bind": "/models/tiny", "mode": "ro"}
            volumes[str(SPIN_OVERLAY)] = {"bind": OVERLAY_MOUNT, "mode": "ro"}
            volumes[str(self.trigger_dir)] = {"bind": TRIGGER_MOUNT, "mode": "rw"}
            env["PYTHONPATH"] = OVERLAY_MOUNT
        else:
            volumes[str(cache_dir() / "big-model")] = {"bind": "/models/big", "mode": "ro"}
        run = start_real(
            client,
            argv,
            prefix="vsup-progress",
            label="progress-measurement",
            volumes=volumes,
            kv_space_gib=1 if spin else 2,
            env=env,
        )
        self.c, self.url, self.key = run.container, run.url, run.key
        self.t0 = time.monotonic()
        self.samples: list[dict[str, Any]] = []
        self.demand = ThreadDemand()
        self.events: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self.engine_pid = 0
        self.api_pid = 0

    def since(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def mark(self, what: str, **kw: Any) -> None:
        ev = {"t": self.since(), "event": what, **kw}
        self.events.append(ev)
        print(json.dumps(ev), flush=True)

    def wait_ready(self, timeout: float = 600) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            self.c.reload()
            if self.c.status == "exited":
                raise RuntimeError("vLLM exited: " + self.c.logs().decode()[-2000:])
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(1)
        else:
            raise RuntimeError("not ready")
        self.engine_pid, self.api_pid = core_pids(self.c)
        return time.monotonic() - start

    def cgroup_cpu_s(self) -> float | None:
        try:
            return int(Path(f"/sys/fs/cgroup/cpuacct/docker/{self.c.id}/cpuacct.usage").read_text()) / 1e9
        except OSError:
            return None

    def sample_once(self) -> dict[str, Any]:
        rec: dict[str, Any] = {"t": self.since()}
        start = time.monotonic()
        try:
            rec["health"] = requests.get(self.url + "/health", timeout=1.5).status_code
        except requests.RequestException as exc:
            rec["health"] = type(exc).__name__
        rec["health_s"] = round(time.monotonic() - start, 3)
        try:
            text = requests.get(self.url + "/metrics", timeout=1.5).text
            rec["m"] = values(text)
            self.last_text = text
        except requests.RequestException as exc:
            rec["m"] = {}
            rec["metrics_error"] = type(exc).__name__
        rec["cg_cpu_s"] = self.cgroup_cpu_s()
        rec["thread_busy"] = self.demand.read(self.c.id, time.monotonic())
        rec["engine_cpu_s"] = proc_cpu_s(self.engine_pid)
        rec["api_cpu_s"] = proc_cpu_s(self.api_pid)
        return rec

    def sampler(self) -> None:
        while not self._stop.is_set():
            rec = self.sample_once()
            self.samples.append(rec)
            print(json.dumps(rec), flush=True)
            self._stop.wait(EVERY_S)

    def scenario(self, out: Path, label: str, body: Any) -> None:
        self.t0 = time.monotonic()
        self.samples, self.events = [], []
        self._stop.clear()
        th = threading.Thread(target=self.sampler, daemon=True)
        th.start()
        try:
            body()
        finally:
            self._stop.set()
            th.join(10)
            doc = {"run": self.name, "scenario": label, "argv": self.argv[3:], "events": self.events}
            doc["samples"] = self.samples
            (out / f"{self.name}-{label}.json").write_text(json.dumps(doc, indent=0), encoding="utf-8")
            with contextlib.suppress(AttributeError):
                (out / f"{self.name}-{label}.metrics.txt").write_text(self.last_text, encoding="utf-8")

    def completion(
        self, label: str, prompt: list[int] | str, max_tokens: int, timeout: float
    ) -> threading.Thread:
        def go() -> None:
            self.mark("send", req=label, prompt_tokens=len(prompt), max_tokens=max_tokens)
            body = {
                "model": SERVED_MODEL_NAME,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "ignore_eos": True,
            }
            try:
                r = requests.post(
                    self.url + "/v1/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {self.key}"},
                    timeout=timeout,
                )
                self.mark("done", req=label, status=r.status_code, usage=r.json().get("usage"))
            except (requests.RequestException, ValueError) as exc:
                self.mark("done", req=label, error=type(exc).__name__)

        th = threading.Thread(target=go, daemon=True)
        th.start()
        return th

    def canary(self, label: str, timeout: float) -> threading.Thread:
        """A streaming 1-token completion: the time of its first data chunk."""

        def go() -> None:
            self.mark("canary.send", req=label)
            body = {"model": SERVED_MODEL_NAME, "prompt": "Hello", "max_tokens": 1, "stream": True}
            start = time.monotonic()
            try:
                with requests.post(
                    self.url + "/v1/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {self.key}"},
                    timeout=timeout,
                    stream=True,
                ) as r:
                    self.mark(
                        "canary.headers",
                        req=label,
                        status=r.status_code,
                        s=round(time.monotonic() - start, 3),
                    )
                    for line in r.iter_lines():
                        if line.startswith(b"data: "):
                            self.mark("canary.first_chunk", req=label, s=round(time.monotonic() - start, 3))
                            break
            except requests.RequestException as exc:
                self.mark(
                    "canary.error", req=label, error=type(exc).__name__, s=round(time.monotonic() - start, 3)
                )

        th = threading.Thread(target=go, daemon=True)
        th.start()
        return th

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.sample_once()["m"]
            if m.get("vllm:num_requests_running", 1) == 0 and m.get("vllm:num_requests_waiting", 1) == 0:
                return
            time.sleep(0.5)


def prompt_ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, 480) for _ in range(n)]


@contextlib.contextmanager
def cpu_hogs(run: Run, count: int) -> Iterator[None]:
    """``count`` containers of the base image, each spinning one core: the box's CPUs taken by others
    (under cgroup v1 each container's cgroup weighs the same, so the engine's share falls to about
    2/(count+1) cores; busy host processes did not starve it: docs/vllm-facts.md). None when 0."""
    if count <= 0:
        yield
        return
    client = docker.from_env(timeout=120)
    hogs = [
        client.containers.run(
            "vllm-supervisor-base:local",
            ["python3", "-c", "while True: pass"],
            detach=True,
            name=f"vsup-progress-hog-{os.getpid()}-{i}",
            labels={"vllm-supervisor.test": "progress-measurement"},
        )
        for i in range(count)
    ]
    run.mark("hogs.start", count=count)
    try:
        yield
    finally:
        for h in hogs:
            with contextlib.suppress(docker.errors.APIError):
                h.remove(force=True)
        run.mark("hogs.stop", count=count)


#: The runs: name -> (extra vLLM arguments, scenarios).
ALL = ("prefill", "saturation", "freeze_busy", "freeze_idle", "freeze_api")
RUNS = {
    "chunked": ([], ALL),
    "monolithic": (["--no-enable-chunked-prefill"], tuple(x for x in ALL if x != "saturation")),
    "starved": (["--no-enable-chunked-prefill"], ("prefill", "freeze_busy")),
    "spin": ([], ("spin_busy",)),  # the tiny model with the spinning-step overlay (chunked prefill on)
}
SPIN_S = 25.0


def run_all(client: docker.DockerClient, out: Path, n: int, which: str) -> None:
    """``which``: all (chunked, then monolithic), one run's name, or ``starved[:HOGS]`` (the monolithic
    server with HOGS spinning containers beside it during each scenario, default 16)."""
    name_, _, count = which.partition(":")
    hogs = int(count or 16) if name_ == "starved" else 0
    for name in ("chunked", "monolithic") if name_ == "all" else (name_,):
        extra, scenarios = RUNS[name]
        run = Run(client, name, extra, n, spin=name == "spin")
        try:
            ready = run.wait_ready()
            run.mark("ready", s=round(ready, 1), engine_pid=run.engine_pid, api_pid=run.api_pid)
            run.completion("warm", prompt_ids(64, 1), 4, 300).join(300)
            (out / f"{name}-startup.log").write_text(run.c.logs().decode("utf-8", "replace")[-20000:])
            for label in scenarios:
                body = SCENARIOS[label]

                def starved(run: Run = run, body: Callable[[Run], None] = body) -> None:
                    with cpu_hogs(run, hogs):
                        body(run)

                run.scenario(out, label, starved)
                run.wait_idle(120)
        finally:
            for pid in (run.engine_pid, run.api_pid):
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            with contextlib.suppress(docker.errors.APIError):
                (out / f"{name}-container.log").write_text(run.c.logs().decode("utf-8", "replace")[-50000:])
            with contextlib.suppress(docker.errors.NotFound):
                run.c.remove(force=True, v=True)
            if run.trigger_dir is not None:
                shutil.rmtree(run.trigger_dir, ignore_errors=True)


def prefill(run: Run) -> None:
    th = run.completion("long", prompt_ids(run.prompt_tokens, 2), 4, 1800)
    time.sleep(5)
    can = run.canary("canary", 1800)
    th.join(1800)
    can.join(60)
    time.sleep(3)


def saturation(run: Run) -> None:
    ths = [run.completion(f"s{i}", prompt_ids(32, 10 + i), 64, 900) for i in range(24)]
    time.sleep(8)
    can = run.canary("canary", 900)
    for th in ths:
        th.join(900)
    can.join(60)
    time.sleep(2)


def freeze_busy(run: Run) -> None:
    ths = [run.completion(f"g{i}", prompt_ids(32, 50 + i), 300, 900) for i in range(2)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if run.samples and run.samples[-1]["m"].get("vllm:num_requests_running", 0) > 0:
            break
        time.sleep(0.2)
    time.sleep(3)
    os.kill(run.engine_pid, signal.SIGSTOP)
    run.mark("sigstop", pid="engine")
    time.sleep(2)
    can = run.canary("canary", 30)
    time.sleep(18)
    os.kill(run.engine_pid, signal.SIGCONT)
    run.mark("sigcont", pid="engine")
    for th in ths:
        th.join(600)
    can.join(30)
    time.sleep(2)


def py_spy_dump(pid: int) -> str:
    """``py-spy dump --pid PID`` of the project venv (as root), its text or why there is none."""
    exe = Path(sys.executable).parent / "py-spy"
    try:
        done = subprocess.run(
            [str(exe), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"py-spy failed: {exc}"
    return done.stdout or done.stderr


def spin_busy(run: Run) -> None:
    """The overlay armed for two running requests, then two generations: the first step after both were
    scheduled spins (a core, no step ends) for SPIN_S, with three py-spy dumps of the EngineCore 1 s apart;
    then the trigger goes and they finish."""
    assert run.trigger_dir is not None
    trigger = run.trigger_dir / "spin"
    trigger.write_text("2", encoding="utf-8")
    run.mark("spin.armed", running=2)
    ths = [run.completion(f"g{i}", prompt_ids(32, 50 + i), 400, 900) for i in range(2)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if run.samples and run.samples[-1]["m"].get("vllm:num_requests_running", 0) >= 2:
            break
        time.sleep(0.1)
    run.mark("spin.start", pid="engine")
    time.sleep(5)
    for i in range(3):
        run.mark("py-spy.dump", n=i, text=py_spy_dump(run.engine_pid))
        time.sleep(1)
    time.sleep(SPIN_S - 8)
    trigger.unlink()
    run.mark("spin.stop", pid="engine")
    for th in ths:
        th.join(600)
    time.sleep(2)


def freeze_idle(run: Run) -> None:
    time.sleep(3)
    os.kill(run.engine_pid, signal.SIGSTOP)
    run.mark("sigstop", pid="engine")
    time.sleep(3)
    th = run.completion("r", prompt_ids(32, 70), 8, 120)
    can = run.canary("canary", 30)
    time.sleep(15)
    os.kill(run.engine_pid, signal.SIGCONT)
    run.mark("sigcont", pid="engine")
    th.join(120)
    can.join(30)
    time.sleep(2)


def freeze_api(run: Run) -> None:
    time.sleep(3)
    os.kill(run.api_pid, signal.SIGSTOP)
    run.mark("sigstop", pid="api")
    can = run.canary("canary", 10)
    time.sleep(10)
    os.kill(run.api_pid, signal.SIGCONT)
    run.mark("sigcont", pid="api")
    can.join(30)
    time.sleep(3)


SCENARIOS: dict[str, Callable[[Run], None]] = {
    "prefill": prefill,
    "saturation": saturation,
    "freeze_busy": freeze_busy,
    "freeze_idle": freeze_idle,
    "freeze_api": freeze_api,
    "spin_busy": spin_busy,
}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(
            "usage: python -m tools.progress_probe OUTDIR [PROMPT_TOKENS]"
            " [all|chunked|monolithic|starved[:HOGS]]",
            file=sys.stderr,
        )
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    n = int(argv[2]) if len(argv) > 2 else 8192
    run_all(docker.from_env(timeout=120), out, n, argv[3] if len(argv) > 3 else "all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The simulator is held to the real engine: the same scripted scenarios run against the real vLLM 0.32 CPU
server (the bigger random model of tools/big_model.py) and against the simulator, and what the daemon's
liveness relies on is compared (docs/vllm-facts.md "Forward progress"):

- a long prefill, chunked and monolithic: whether the request is counted at first, which progress signals
  move while it runs (the prompt counter must not; the KV usage per chunk; the CPU time), whether the whole
  prompt is counted at its end;
- EngineCore stopped while two generations run: /health 200, the gauges and counters frozen, the CPU flat;
- EngineCore stopped while idle, then a request: counted nowhere, /health 200; answered after the thaw;
- the API-server process stopped: /health does not answer; it answers again after the thaw;
- the engine core's step spinning on the CPU while two generations run (issue 35; real: the test overlay
  tools/overlays/spin on its PYTHONPATH, sim: VSIM_SPIN_TRIGGER, the same trigger file): /health 200, every
  counter frozen with both counted running, the CPU busy; both answered once the trigger goes.

Where they differ, the simulator is what gets fixed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from supervisor.adapters.docker.errors import until_reaped
from supervisor.adapters.host.cputime import container_cpu_s
from supervisor.core.vllm.metrics import VllmMetrics
from supervisor.sim.launch import sim_run_kwargs
from tests.conftest import Resources
from tests.harness import free_port, wait_for
from tools import spin_trigger
from tools.realvllm import SERVED_MODEL_NAME, RealVllmPaths, engine_env, server_argv, volumes

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

PROMPT_TOKENS = 4096
BATCH = "2048"
SAMPLE_S = 0.5
#: freeze_busy's two generations must still run when the engine is frozen (~1.5 s after /metrics counts
#: them): 150 tokens are ~6 s of decode on the real big model (2026-12-02, light load; slower under more),
#: and the simulator's generations last as long (VSIM_GEN_SECONDS: a simulated generation takes that long
#: whatever its length). Both are still waited for in full after the thaw (``answered_after_thaw``).
BUSY_TOKENS = 150
GEN_S = "6"
#: The spin trigger inside both containers (written with ``docker exec``: no mount needed).
SPIN_TRIGGER = "/tmp/vsup-spin"
OVERLAY = Path(__file__).resolve().parent.parent / "tools" / "overlays" / "spin"


@dataclass
class Server:
    """One server under test and how to freeze its parts."""

    kind: str  # real | sim
    container: Any
    url: str
    key: str

    def _engine_pid(self) -> int:
        top = self.container.top(ps_args="-eo pid,args")
        return next(int(p[0]) for p in top["Processes"] if "VLLM::EngineCore" in p[1])

    def freeze_engine(self) -> Callable[[], None]:
        """The engine core stopped (real: SIGSTOP of VLLM::EngineCore; sim: its "stuck" fault)."""
        if self.kind == "sim":
            requests.post(self.url + "/_sim/fault", json={"kind": "stuck"}, timeout=5).raise_for_status()

            def resume() -> None:
                requests.post(self.url + "/_sim/fault", json={"kind": "resume"}, timeout=5).raise_for_status()

            return resume
        pid = self._engine_pid()
        os.kill(pid, signal.SIGSTOP)
        return lambda: os.kill(pid, signal.SIGCONT)

    def spin(self, running: int) -> Callable[[], None]:
        """Arm the spin trigger: the next step with ``running`` requests scheduled spins (real: the overlay's
        ``EngineCore.step``; sim: VSIM_SPIN_TRIGGER); the undo removes it."""
        return spin_trigger.arm(self.container, SPIN_TRIGGER, running)

    def freeze_api(self) -> Callable[[], None]:
        """The API-server process stopped (both: the container's main process)."""
        self.container.reload()
        pid = int(self.container.attrs["State"]["Pid"])
        os.kill(pid, signal.SIGSTOP)
        return lambda: os.kill(pid, signal.SIGCONT)

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": time.monotonic(), "cpu": container_cpu_s(self.container.id)}
        try:
            out["health"] = requests.get(self.url + "/health", timeout=1.5).status_code
            m = VllmMetrics.from_text(requests.get(self.url + "/metrics", timeout=1.5).text)
        except requests.RequestException:
            out["health"] = None
            return out
        out |= {
            "running": m.requests_running,
            "waiting": m.requests_waiting,
            "prompt": m.prompt_tokens_total,
            "gen": m.generation_tokens_total,
            "iters": m.iterations_total,
            "kv": m.kv_cache_usage,
        }
        return out

    def send(
        self, prompt: list[int] | str, max_tokens: int, timeout: float
    ) -> Callable[[float], dict[str, Any]]:
        result: dict[str, Any] = {}

        def run() -> None:
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
                result["status"] = r.status_code
                result["usage"] = r.json().get("usage") if r.status_code == 200 else None
            except (requests.RequestException, ValueError) as exc:
                result["error"] = type(exc).__name__

        th = threading.Thread(target=run, daemon=True)
        th.start()

        def join(wait: float) -> dict[str, Any]:
            th.join(wait)
            return dict(result)

        return join


def _sample_until(server: Server, done: Callable[[], bool], limit_s: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    end = time.monotonic() + limit_s
    while time.monotonic() < end and not done():
        out.append(server.sample())
        time.sleep(SAMPLE_S)
    return out


def _samples(server: Server, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        time.sleep(SAMPLE_S)
        out.append(server.sample())
    return out


def _moved(samples: list[dict[str, Any]]) -> set[str]:
    """Which signals changed across the samples (``cpu``: >= 0.2 cores on average between two samples)."""
    moved: set[str] = set()
    for a, b in itertools.pairwise(samples):
        for k in ("prompt", "gen", "iters", "kv", "running", "waiting"):
            if a.get(k) is not None and b.get(k) is not None and a[k] != b[k]:
                moved.add(k)
        if a["cpu"] is not None and b["cpu"] is not None and (b["cpu"] - a["cpu"]) >= 0.2 * (b["t"] - a["t"]):
            moved.add("cpu")
    return moved


def prefill(server: Server, tokens: int, chunked: bool) -> dict[str, Any]:
    """A prompt of ``tokens`` token ids; ``during`` = what probes see until the prefill ends (the first
    change of the prompt or generation counter), whatever the decode after it takes."""
    rng = random.Random(tokens)
    join = server.send([rng.randrange(10, 480) for _ in range(tokens)], 4, 600)
    samples = _sample_until(server, lambda: bool(join(0.0)), 600)
    res = join(30)
    samples.append(server.sample())
    first = samples[0]
    end = next(
        (i for i, x in enumerate(samples) if (x["prompt"], x["gen"]) != (first["prompt"], first["gen"])),
        len(samples),
    )
    during = samples[:end]
    step = samples[end] if end < len(samples) else samples[-1]
    return {
        "answered": res.get("status"),
        "counted_at_first": bool(first.get("running") or first.get("waiting")),
        "kv_moved_during": "kv" in _moved(during) if chunked else None,
        "cpu_busy_during": "cpu" in _moved(during),
        "long_enough_to_see": len(during) >= 6,
        # the whole prompt is counted at once, when the prefill ends, not per chunk
        "prompt_counted_at_once": (step["prompt"] or 0) - (first["prompt"] or 0) >= tokens,
        "gen_before_prompt": (step["gen"] or 0) > (first["gen"] or 0) and step["prompt"] == first["prompt"],
    }


def freeze_busy(server: Server) -> dict[str, Any]:
    joins = [server.send("Tell me a long story.", BUSY_TOKENS, 300) for _ in range(2)]
    wait_for(lambda: (server.sample().get("running") or 0) >= 1, 60, interval=0.1, message="running")
    time.sleep(1.0)
    thaw = server.freeze_engine()
    try:
        time.sleep(1.0)
        samples = _samples(server, 8)
    finally:
        thaw()
    results = [j(300) for j in joins]
    return {
        "health": sorted({s["health"] for s in samples}),
        "moved_while_frozen": sorted(_moved(samples)),
        "running_while_frozen": min(s["running"] or 0 for s in samples) >= 1,
        "answered_after_thaw": [r.get("status") for r in results],
    }


def spin_busy(server: Server) -> dict[str, Any]:
    undo = server.spin(2)
    try:
        joins = [server.send("Tell me a long story.", BUSY_TOKENS, 300) for _ in range(2)]
        wait_for(lambda: (server.sample().get("running") or 0) >= 2, 60, interval=0.1, message="2 running")
        time.sleep(1.0)
        samples = _samples(server, 8)
    finally:
        undo()
    results = [j(300) for j in joins]
    return {
        "health": sorted({s["health"] for s in samples}),
        "moved_while_spinning": sorted(_moved(samples)),
        "running_while_spinning": min(s["running"] or 0 for s in samples) >= 2,
        "answered_after": [r.get("status") for r in results],
    }


def freeze_idle(server: Server) -> dict[str, Any]:
    thaw = server.freeze_engine()
    try:
        time.sleep(2.0)
        join = server.send("Hello there.", 8, 120)
        time.sleep(1.0)
        samples = _samples(server, 8)
    finally:
        thaw()
    return {
        "health": sorted({s["health"] for s in samples}),
        "counted": any((s["running"] or 0) + (s["waiting"] or 0) > 0 for s in samples),
        "moved_while_frozen": sorted(_moved(samples)),
        "answered_after_thaw": join(120).get("status"),
    }


def freeze_api(server: Server) -> dict[str, Any]:
    thaw = server.freeze_api()
    try:
        time.sleep(0.5)
        health = server.sample()["health"]
    finally:
        thaw()
    code = wait_for(lambda: server.sample()["health"], 30, interval=0.5, message="/health after the thaw")
    return {"health_while_frozen": health, "health_after_thaw": code}


def _real(resources: Resources, base_image: str, chunked: bool) -> Server:
    from tools.realvllm import ensure, ensure_cached

    p = ensure()
    big = ensure_cached()
    port, key = free_port(), secrets.token_urlsafe(16)
    args = [*server_argv(p.venv, max_model_len=16384), "--max-num-batched-tokens", BATCH]
    if not chunked:
        args = [*server_argv(p.venv, max_model_len=16384), "--no-enable-chunked-prefill"]
    name = resources.name("conf-real")
    c = resources.client.containers.run(
        base_image,
        args,
        name=name,
        detach=True,
        labels=resources.labels,
        shm_size="1g",
        ports={"8000/tcp": ("127.0.0.1", port)},
        environment=engine_env(
            {
                "VLLM_CPU_KVCACHE_SPACE": "2",
                "VLLM_API_KEY": key,
                "PYTHONPATH": "/vsup-overlay",
                "VSUP_SPIN_TRIGGER": SPIN_TRIGGER,
            }
        ),
        volumes={
            **volumes(RealVllmPaths(p.venv, big), fork=True),
            str(OVERLAY): {"bind": "/vsup-overlay", "mode": "ro"},
        },
        ulimits=[docker.types.Ulimit(name="memlock", soft=8388608, hard=8388608)],
    )
    resources.track(name)
    return Server("real", c, f"http://127.0.0.1:{port}", key)


def _sim(resources: Resources, chunked: bool) -> Server:
    port, key = free_port(), secrets.token_urlsafe(16)
    args = ["--model", "/models/tiny", "--served-model-name", SERVED_MODEL_NAME, "--max-model-len", "16384"]
    args += ["--max-num-batched-tokens", BATCH] if chunked else ["--no-enable-chunked-prefill"]
    env = {"VSIM_LOAD_SECONDS": "1", "VLLM_API_KEY": key, "VSIM_PREFILL_TOKENS_PER_S": "400"}
    env |= {"VSIM_GEN_SECONDS": GEN_S, "VSIM_MAX_TOKENS_DEFAULT": "2000"}  # generations that last
    env |= {"VSIM_SPIN_TRIGGER": SPIN_TRIGGER}
    name = resources.name("conf-sim")
    kwargs = sim_run_kwargs(name, port, resources.labels, env=env, args=args)
    c = resources.client.containers.run(**kwargs)
    resources.track(name)
    return Server("sim", c, f"http://127.0.0.1:{port}", key)


def _ready(server: Server) -> None:
    wait_for(lambda: server.sample()["health"] == 200, 600, interval=0.2, message=f"{server.kind} ready")
    if server.kind == "real":  # a real engine's first request after a load may be slow; the simulator's not
        server.send("warm up", 4, 300)(300)


def _script(server: Server, chunked: bool) -> dict[str, Any]:
    _ready(server)
    out: dict[str, Any] = {"prefill": prefill(server, PROMPT_TOKENS, chunked)}
    if chunked:
        out["freeze_busy"] = freeze_busy(server)
        out["spin_busy"] = spin_busy(server)
        out["freeze_idle"] = freeze_idle(server)
        out["freeze_api"] = freeze_api(server)
    return out


@pytest.fixture(scope="module")
def observations(
    docker_client: docker.DockerClient, base_image: str, sim_image: str, real_vllm_paths: Any
) -> Iterator[dict[tuple[str, bool], dict[str, Any]]]:
    resources = Resources(docker_client, f"conformance-{secrets.token_hex(4)}")
    seen: dict[tuple[str, bool], dict[str, Any]] = {}
    try:
        for chunked in (True, False):
            # The real engine's load (~23 s of a core: torch and vLLM imported twice) runs while
            # the simulator's script does; the real script runs alone (the real server is only sampled once
            # it answers /health, and nothing else of this module runs beside its script).
            real = _real(resources, base_image, chunked)
            try:
                sim = _sim(resources, chunked)
                try:
                    seen[("sim", chunked)] = _script(sim, chunked)
                finally:
                    _remove(sim)
                seen[("real", chunked)] = _script(real, chunked)
            finally:
                _remove(real)
            for kind in ("real", "sim"):
                print(kind, "chunked" if chunked else "monolithic", seen[(kind, chunked)])
        yield seen
    finally:
        resources.cleanup()


def _remove(server: Server) -> None:
    with contextlib.suppress(docker.errors.APIError):
        until_reaped(lambda: server.container.remove(force=True))


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "monolithic"])
def test_the_simulator_prefills_as_the_real_engine_does(
    observations: dict[tuple[str, bool], dict[str, Any]], chunked: bool
) -> None:
    real, sim = observations[("real", chunked)]["prefill"], observations[("sim", chunked)]["prefill"]
    assert real["answered"] == 200
    assert real["prompt_counted_at_once"] is True  # what the daemon relies on, seen on the real engine
    assert real["cpu_busy_during"] is True
    assert sim == real


@pytest.mark.parametrize("shape", ["freeze_busy", "freeze_idle", "freeze_api"])
def test_the_simulator_freezes_as_the_real_engine_does(
    observations: dict[tuple[str, bool], dict[str, Any]], shape: str
) -> None:
    real, sim = observations[("real", True)][shape], observations[("sim", True)][shape]
    assert sim == real


def test_the_simulator_spins_as_the_real_engine_does(
    observations: dict[tuple[str, bool], dict[str, Any]],
) -> None:
    """A step spinning on the CPU: /health 200, both requests counted running, only the CPU moving."""
    real, sim = observations[("real", True)]["spin_busy"], observations[("sim", True)]["spin_busy"]
    assert real == {
        "health": [200],
        "moved_while_spinning": ["cpu"],
        "running_while_spinning": True,
        "answered_after": [200, 200],
    }
    assert sim == real

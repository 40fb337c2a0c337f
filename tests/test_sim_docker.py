"""The simulator image on the real Docker engine: readiness, scenarios, signals, auth, metrics, KV lottery."""

from __future__ import annotations

import random
import re
import threading
from typing import Any

import docker
import pytest
import requests

from supervisor.sim import vllm_sim
from tests.harness import wait_for
from tests.sim_fixtures import SimHandle, start_sim

pytestmark = pytest.mark.docker

FAST = {"VSIM_LOAD_SECONDS": "1", "VSIM_SHARDS": "4"}
CHAT = {"messages": [{"role": "user", "content": "Say something about foxes, please."}]}
KEY = "sk-sim-cli-7f3a9c"
ENV_KEY = "sk-sim-env-1b2d"


def metric(sim: SimHandle, name: str, extra: str = "") -> float:
    """One sample value of a vllm:* series from /metrics."""
    text = sim.get("/metrics").text
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*{re.escape(extra)}[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_refused_while_loading_then_full_startup_and_endpoints(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """No HTTP answer while loading (shards printed), then the full v0_11 sequence and all endpoints."""
    sim = start_sim(
        docker_client,
        resources,
        env={"VSIM_LOAD_SECONDS": "3", "VSIM_SHARDS": "6", "VSIM_FLAVOR": "v0_11"},  # 0.11's lines, named
        args=[
            "--model",
            "/models/tiny",
            "--served-model-name",
            "tiny",
            "--max-model-len",
            "4096",
            "--enforce-eager",
            "--dtype",
            "bfloat16",
            "--gpu-memory-utilization=0.8",
            "-tp",
            "1",
        ],
    )
    sim.wait_log(r"Loading safetensors checkpoint shards:\s+\d+% Completed \| [1-5]/6 \[", timeout=15)
    assert "Application startup complete." not in sim.logs()
    assert sim.health_code() is None  # bound, not listening: refused (docker-proxy turns it into a reset)
    sim.wait_ready()
    logs = sim.logs()
    order = [
        "vLLM API server version 0.11.0",
        "non-default args:",
        "Initializing a V1 LLM engine (v0.11.0)",
        "Loading weights took",
        "Model loading took",
        "Available KV cache memory",
        "GPU KV cache size: 1,069,759 tokens",
        "Maximum concurrency for 4,096 tokens per request: 261.17x",
        "Graph capturing finished",
        "init engine (profile, create kv cache, warmup model) took",
        "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 66859",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
        "Route: /v1/chat/completions, Methods: POST",
        "INFO:     Started server process [1]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ]
    assert "Loading safetensors checkpoint shards: 100% Completed | 6/6" in logs  # stderr, like tqdm
    out = sim.stdout()  # stdout alone: docker does not order lines across the two streams exactly
    positions = [out.find(s) for s in order]
    assert all(p >= 0 for p in positions), [s for s, p in zip(order, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    assert "(EngineCore_DP0 pid=" in logs
    assert "(APIServer pid=1) INFO:     Application startup complete." in logs

    assert sim.get("/version").json() == {"version": "0.11.0"}
    assert sim.get("/load").json() == {"server_load": 0}
    assert sim.get("/ping").status_code == 200
    assert sim.post("/ping").status_code == 200
    assert sim.get("/nope").status_code == 404
    models = sim.get("/v1/models").json()
    card = models["data"][0]
    assert (models["object"], card["id"], card["root"], card["max_model_len"], card["owned_by"]) == (
        "list",
        "tiny",
        "/models/tiny",
        4096,
        "vllm",
    )
    r = sim.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5})
    usage = r.json()["usage"]
    assert (usage["completion_tokens"], usage["total_tokens"]) == (5, usage["prompt_tokens"] + 5)
    r = sim.post("/v1/completions", json={"prompt": "hello", "max_tokens": 100})
    assert r.json()["usage"]["completion_tokens"] == 16
    assert sim.post("/v1/chat/completions", data=b"{not json").status_code == 400
    with requests.post(
        sim.url + "/v1/chat/completions", json={**CHAT, "stream": True}, stream=True, timeout=10
    ) as s:
        events = [ln for ln in s.iter_lines(decode_unicode=True) if ln]
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 16
    wait_for(lambda: '"POST /v1/chat/completions HTTP/1.1" 200 OK' in sim.logs(), 5, message="access log")
    assert '"GET /nope HTTP/1.1" 404 Not Found' in sim.logs()


@pytest.mark.parametrize(
    ("scenario", "cause"),
    [
        (
            "fail_gpu_mem_util",
            r"ValueError: Free memory on device cuda:0 \(31\.44/47\.38 GiB\) on startup is less than desired",
        ),
        ("fail_oom", r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate 224\.00 MiB"),
        ("fail_kv_insufficient", r"To serve at least one request with the model's max seq len \(32768\)"),
        ("fail_no_kv", r"ValueError: No available memory for the cache blocks"),
        ("fail_engine_init", r"WorkerProc initialization failed"),
        ("fail_worker_exception", r"WorkerProc failed to start\.(?:.|\n)*ValueError: NvFp4 MoE backend"),
    ],
)
def test_startup_failure_exits_1(
    docker_client: docker.DockerClient, resources: Any, sim_image: str, scenario: str, cause: str
) -> None:
    """Each §3.1 failure prints its cause, `EngineCore failed to start.`, the API RuntimeError; exit 1.
    The default flavour, vLLM 0.32's: its raw traceback lines carry no process prefix (0.11's ANSI prefix:
    tests/test_sim_lines.py)."""
    sim = start_sim(docker_client, resources, env={**FAST, "VSIM_SCENARIO": scenario})
    assert sim.wait_exit() == 1
    logs = sim.logs()
    assert re.search(cause, logs)
    assert "EngineCore failed to start." in logs
    assert re.search(
        r"^RuntimeError: Engine core initialization failed\. See root cause above\. "
        r"Failed core proc\(s\): \{\}$",
        logs,
        re.M,
    )
    assert "Application startup complete." not in logs


def test_die_after_ready_503_then_exit_0(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Engine death: /health 503, completions 500, EngineDeadError lines, uvicorn shutdown, exit 0."""
    sim = start_sim(
        docker_client,
        resources,
        env={
            **FAST,
            "VSIM_SCENARIO": "die_after_ready",
            "VSIM_DIE_AFTER": "1",
            "VSIM_DEAD_HEALTH_SECONDS": "3",
        },
    )
    sim.wait_ready()
    wait_for(lambda: sim.health_code() == 503, 10, message="/health 503")
    assert sim.get("/ping").status_code == 503
    assert sim.post("/v1/chat/completions", json=CHAT).status_code == 500
    assert sim.wait_exit() == 0
    logs = sim.logs()
    for needle in (
        "EngineCore encountered a fatal error.",
        "AsyncLLM output_handler failed.",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        '"POST /v1/chat/completions HTTP/1.1" 500',
        "INFO:     Application shutdown complete.",
    ):
        assert needle in logs, needle


def test_fault_hook_die_v0_9_health_500_and_exit_code(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """The hook kills the engine (v0_9 health answers 500) and `exit` ends the process with the given code."""
    sim = start_sim(
        docker_client, resources, env={**FAST, "VSIM_FLAVOR": "v0_9", "VSIM_DEAD_HEALTH_SECONDS": "30"}
    )
    sim.wait_ready()
    assert "vLLM API server version 0.9.2" in sim.logs()
    assert sim.post("/_sim/fault", json={"kind": "bogus"}).status_code == 400
    assert sim.post("/_sim/fault", json={"kind": "die"}).status_code == 200
    wait_for(lambda: sim.health_code() == 500, 5, message="/health 500 (v0_9)")
    assert sim.post("/_sim/fault", json={"kind": "exit", "code": 3}).status_code == 200
    assert sim.wait_exit() == 3


def test_hang_load_never_ready(docker_client: docker.DockerClient, resources: Any, sim_image: str) -> None:
    """hang_load stops mid shards, repeats the shm broadcast warning, never listens."""
    sim = start_sim(
        docker_client, resources, env={**FAST, "VSIM_SCENARIO": "hang_load", "VSIM_HANG_INTERVAL": "0.3"}
    )
    wait_for(
        lambda: sim.logs().count("No available shared memory broadcast block found in 60 seconds") >= 2,
        15,
        message="two hang hints",
    )
    logs = sim.logs()
    assert "Completed | 2/4" in logs
    assert "Completed | 3/4" not in logs
    assert sim.health_code() is None


def test_sigterm_before_ready_exits_130(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """VSIM_TERM_DURING_INIT=interrupt: SIGTERM while loading prints `KeyboardInterrupt: terminated` and
    exits 130."""
    env = {"VSIM_LOAD_SECONDS": "20", "VSIM_TERM_DURING_INIT": "interrupt"}
    sim = start_sim(docker_client, resources, env=env)
    sim.wait_log(r"checkpoint shards:\s+0% Completed")
    sim.container.kill(signal="SIGTERM")
    assert sim.wait_exit() == 130
    assert re.search(r"^KeyboardInterrupt: terminated$", sim.logs(), re.M)  # 0.32: a raw line, no prefix


def test_by_default_the_first_sigterm_during_init_is_lost_and_a_second_one_exits_130(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """As real vLLM 0.32 (docs/vllm-facts.md "SIGTERM"): one SIGTERM during the engine's initialisation
    changes nothing (the load goes on); a second one ends the start with exit 130."""
    sim = start_sim(docker_client, resources, env={"VSIM_LOAD_SECONDS": "20"})
    sim.wait_log(r"checkpoint shards:\s+0% Completed")
    sim.container.kill(signal="SIGTERM")
    sim.wait_log(r"checkpoint shards:\s+50% Completed")  # still loading, several seconds later
    sim.container.reload()
    assert sim.container.status == "running"
    assert "KeyboardInterrupt" not in sim.logs()
    sim.container.kill(signal="SIGTERM")
    assert sim.wait_exit() == 130
    assert re.search(r"^KeyboardInterrupt: terminated$", sim.logs(), re.M)  # 0.32: a raw line, no prefix


def test_sigterm_after_ready_v0_11_exits_0(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """SIGTERM after ready (no --shutdown-timeout): FastAPI/uvicorn shutdown lines, exit 0."""
    sim = start_sim(docker_client, resources, env={**FAST, "VSIM_FLAVOR": "v0_11"})
    sim.wait_ready()
    sim.container.kill(signal="SIGTERM")
    assert sim.wait_exit() == 0
    logs = sim.logs()
    assert logs.index("Shutting down FastAPI HTTP server.") < logs.index(
        "INFO:     Finished server process [1]"
    )


def test_sigterm_drain_lets_inflight_finish(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """v0_32 with --shutdown-timeout: in-flight request completes, new /v1 gets 503, /health 200, exit 0."""
    sim = start_sim(
        docker_client,
        resources,
        env={**FAST, "VSIM_FLAVOR": "v0_32", "VSIM_GEN_SECONDS": "3"},
        args=["--model", "m", "--shutdown-timeout", "10"],
    )
    sim.wait_ready()
    result: dict[str, Any] = {}

    def inflight() -> None:
        result["resp"] = sim.post("/v1/completions", json={"prompt": "long one"}, timeout=15)

    t = threading.Thread(target=inflight, daemon=True)
    t.start()
    wait_for(lambda: metric(sim, "vllm:num_requests_running") == 1, 5, message="request running")
    sim.container.kill(signal="SIGTERM")
    sim.wait_log(r"stopping engine client mode=drain timeout=10s")
    assert sim.health_code() == 200
    assert sim.get("/v1/models").status_code == 200  # real 0.32: only generation is refused while draining
    assert sim.post("/v1/completions", json={"prompt": "late"}).status_code == 503
    t.join(timeout=15)
    assert result["resp"].status_code == 200
    assert result["resp"].json()["usage"]["completion_tokens"] == 16
    assert sim.wait_exit() == 0
    logs = sim.logs()
    assert "[shutdown] EngineCore: trigger received signal=SIGTERM" in logs
    assert "draining in-flight requests count=1 timeout=10s" in logs
    assert "\nINFO:     Application shutdown complete." in logs  # un-prefixed uvicorn line in 0.32
    assert "Finished server process" not in logs  # the real 0.32 server does not print it


def test_auth_rules(docker_client: docker.DockerClient, resources: Any, sim_image: str) -> None:
    """CLI key beats VLLM_API_KEY, any-case bearer, only /v1 guarded, exact 401 body, key never logged."""
    sim = start_sim(
        docker_client,
        resources,
        env={**FAST, "VLLM_API_KEY": ENV_KEY},
        args=["--model", "m", "--api-key", KEY],
    )
    envonly = start_sim(
        docker_client, resources, env={**FAST, "VLLM_API_KEY": ENV_KEY}, args=["--model", "m"]
    )
    sim.wait_ready()
    assert sim.get("/v1/models", headers={"Authorization": f"bearer {KEY}"}).status_code == 200
    assert sim.get("/v1/models", headers={"Authorization": f"BEARER {KEY}"}).status_code == 200
    for headers in (
        {},
        {"Authorization": f"Bearer {ENV_KEY}"},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": KEY},
    ):
        r = sim.get("/v1/models", headers=headers)
        assert r.status_code == 401
        assert r.content == b'{"error":"Unauthorized"}'  # compact, byte for byte as the real server
        assert "www-authenticate" not in r.headers
    assert sim.post("/v1/chat/completions", json=CHAT).status_code == 401
    for path in ("/health", "/ping", "/metrics", "/version", "/load"):
        assert sim.get(path).status_code == 200, path
    envonly.wait_ready()
    assert envonly.get("/v1/models", headers={"Authorization": f"Bearer {ENV_KEY}"}).status_code == 200
    assert envonly.get("/v1/models").status_code == 401
    logs = sim.logs()
    assert "'api_key': '***'" in logs  # vLLM 0.32 redacts it (0.11 printed it: tests/test_sim_lines.py)
    assert KEY not in logs


def test_metrics_move_with_traffic(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """Counters follow requests; with one batch slot the others wait (num_requests_waiting)."""
    sim = start_sim(
        docker_client,
        resources,
        env={**FAST, "VSIM_MAX_RUNNING": "1", "VSIM_GEN_SECONDS": "1.5", "VSIM_KV_TOKENS": "1600000"},
    )
    sim.wait_ready()
    r = sim.get("/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# HELP vllm:num_requests_running" in r.text
    assert "# TYPE vllm:generation_tokens_total counter" in r.text
    assert re.search(
        r'vllm:cache_config_info\{[^}]*engine="0"[^}]*num_gpu_blocks="100000"[^}]*\} 1\.0', r.text
    )
    assert metric(sim, "vllm:generation_tokens_total") == 0.0
    threads = [
        threading.Thread(
            target=lambda: sim.post("/v1/completions", json={"prompt": "abcdefgh"}, timeout=15), daemon=True
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    wait_for(lambda: metric(sim, "vllm:num_requests_waiting") == 2, 5, message="2 waiting")
    assert metric(sim, "vllm:num_requests_running") == 1
    for t in threads:
        t.join(timeout=15)
    assert metric(sim, "vllm:generation_tokens_total") == 48.0
    assert metric(sim, "vllm:prompt_tokens_total") == 6.0
    assert metric(sim, "vllm:request_success_total", 'finished_reason="stop"') == 3.0
    assert metric(sim, "vllm:num_requests_running") == 0.0


def test_kv_lottery(docker_client: docker.DockerClient, resources: Any, sim_image: str) -> None:
    """Two starts with a list each report a listed KV size; the line parses; concurrency = tokens/len."""
    choices = {1013816, 557599}
    args = ["--model", "m", "--max-model-len", "65536"]
    envs = [{**FAST, "VSIM_KV_TOKENS": "1013816,557599,557599", "VSIM_SEED": seed} for seed in ("1", "4")]
    # each seed's draw, by the simulator's own rule: the container must report exactly that pool
    want = [vllm_sim.load_config(args, env, random.Random(env["VSIM_SEED"])).kv_tokens for env in envs]
    sims = [start_sim(docker_client, resources, env=env, args=args) for env in envs]
    seen = []
    for sim in sims:
        m = sim.wait_log(r"GPU KV cache size: (?P<tok>[\d,]+) tokens")
        c = sim.wait_log(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
        tokens = int(m["tok"].replace(",", ""))
        assert tokens in choices
        assert c["len"] == "65,536"
        assert c["x"] == f"{tokens / 65536:.2f}"
        sim.wait_ready()
        assert f'num_gpu_blocks="{tokens // 16}"' in sim.get("/metrics").text
        seen.append(tokens)
    assert seen == want
    assert set(seen) == choices  # seeds 1 and 4 draw the two sizes: the same config, two pools


def test_v0_32_http_shapes_and_sigterm_lost_during_init(
    docker_client: docker.DockerClient, resources: Any, sim_image: str
) -> None:
    """As the real 0.32 server: SIGTERM during engine init is lost (knob), HEAD /health 405, bare /health,
    unknown model 404, compact JSON errors, `_created` counter samples; SIGTERM after ready exits 0."""
    sim = start_sim(
        docker_client,
        resources,
        env={"VSIM_FLAVOR": "v0_32", "VSIM_LOAD_SECONDS": "3", "VSIM_TERM_DURING_INIT": "ignore"},
        args=["--model", "/models/tiny", "--served-model-name", "tiny", "--max-model-len", "512"],
    )
    sim.wait_log(r"checkpoint shards:\s+0% Completed")
    sim.container.kill(signal="SIGTERM")
    sim.wait_ready()
    assert "KeyboardInterrupt" not in sim.logs()
    health = sim.get("/health")
    assert (health.status_code, health.content, health.headers.get("content-type")) == (200, b"", None)
    head = requests.head(sim.url + "/health", timeout=5)
    assert (head.status_code, head.headers["allow"]) == (405, "GET")
    assert requests.head(sim.url + "/metrics", timeout=5).status_code == 200
    wrong = sim.post("/v1/chat/completions", json={**CHAT, "model": "old-name"})
    assert wrong.status_code == 404
    assert wrong.json()["error"]["type"] == "NotFoundError"
    assert wrong.content.startswith(b'{"error":{"message":"The model `old-name` does not exist.')
    assert sim.post("/v1/chat/completions", json={**CHAT, "model": "tiny"}).status_code == 200
    bad = sim.post("/v1/chat/completions", data=b"{bad")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, 400)
    text = sim.get("/metrics").text
    assert re.search(r'^vllm:generation_tokens_created\{engine="0",model_name="tiny"\} \S+e\+09$', text, re.M)
    assert 'kv_cache_max_concurrency="2089.373046875"' in text
    sim.container.kill(signal="SIGTERM")
    assert sim.wait_exit() == 0
    assert "[shutdown] API server: shutdown triggered" in sim.logs()

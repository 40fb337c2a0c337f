"""The real vLLM CPU server (tiny local model) in a real container: readiness, auth, completions, metrics.

The server is the run's shared one (tests/real_server.py: one load for this module and the smoke gates').
"""

from __future__ import annotations

from typing import Any

import docker
import pytest
import requests

from supervisor.adapters.vllm.probes import check_health
from supervisor.core.vllm.analyzer import LogAnalyzer
from tests.harness import wait_for
from tests.real_server import RealVllm, _logs
from tools.realvllm import SERVED_MODEL_NAME

pytestmark = [pytest.mark.real_vllm, pytest.mark.docker, pytest.mark.slow]


def _chat(server: RealVllm, max_tokens: int = 8) -> dict[str, Any]:
    resp = requests.post(
        f"{server.base_url}/v1/chat/completions",
        headers=server.auth(),
        json={
            "model": SERVED_MODEL_NAME,
            "messages": [{"role": "user", "content": "Hello, how are you?"}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
        },
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _metrics(server: RealVllm) -> dict[str, float]:
    """Prometheus text of /metrics as {series name: sum over label sets} (comments skipped)."""
    resp = requests.get(f"{server.base_url}/metrics", timeout=10)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    out: dict[str, float] = {}
    for line in resp.text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name = series.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


def test_the_analyzer_reads_the_real_boot_and_the_health_probe_needs_no_key(
    real_vllm: RealVllm, docker_client: docker.DockerClient
) -> None:
    """Our log analyzer, fed the real server's whole log, calls the boot ready and reads its KV pool; our
    /health probe (no key) answers ok although the server enforces a key on the API."""
    analyzer = LogAnalyzer()
    for line in _logs(docker_client, real_vllm.container_id).splitlines():
        analyzer.feed(line)
    assert analyzer.outcome() == "ready"
    assert analyzer.report()["kv_tokens"] > 0
    probe = check_health(real_vllm.base_url, 5)
    assert probe.ok, probe
    assert probe.status == 200
    assert requests.get(f"{real_vllm.base_url}/v1/models", timeout=5).status_code == 401


def test_models_requires_key(real_vllm: RealVllm) -> None:
    """/v1/models: 401 {"error": "Unauthorized"} without the right key; lists the model with it."""
    anon = requests.get(f"{real_vllm.base_url}/v1/models", timeout=10)
    assert anon.status_code == 401
    assert anon.json() == {"error": "Unauthorized"}
    wrong = requests.get(
        f"{real_vllm.base_url}/v1/models", headers={"Authorization": "Bearer not-the-key"}, timeout=10
    )
    assert wrong.status_code == 401
    ok = requests.get(f"{real_vllm.base_url}/v1/models", headers=real_vllm.auth(), timeout=10)
    assert ok.status_code == 200
    assert [m["id"] for m in ok.json()["data"]] == [SERVED_MODEL_NAME]


def test_chat_completion_counts_tokens(real_vllm: RealVllm) -> None:
    """A chat completion with the key generates real tokens (usage.completion_tokens > 0)."""
    body = _chat(real_vllm, max_tokens=8)
    assert body["model"] == SERVED_MODEL_NAME
    assert 0 < body["usage"]["completion_tokens"] <= 8
    assert body["usage"]["prompt_tokens"] > 0
    assert isinstance(body["choices"][0]["message"]["content"], str)


def test_metrics_series_and_counter_growth(real_vllm: RealVllm) -> None:
    """/metrics (no key) has the running gauge and a generation counter that grows after a completion."""
    before = _metrics(real_vllm)
    assert "vllm:num_requests_running" in before
    assert "vllm:generation_tokens_total" in before
    generated = _chat(real_vllm, max_tokens=6)["usage"]["completion_tokens"]
    # The counter is updated by the engine's stats loop shortly after the response: poll, do not sleep.
    after = wait_for(
        lambda: (
            m
            if (m := _metrics(real_vllm))["vllm:generation_tokens_total"]
            >= before["vllm:generation_tokens_total"] + generated
            else None
        ),
        timeout=30,
        interval=0.5,
        message="vllm:generation_tokens_total to grow",
    )
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] >= generated
    assert after["vllm:num_requests_running"] == 0

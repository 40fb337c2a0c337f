"""The real vLLM CPU server (tiny local model) in a real container: readiness, auth, completions, metrics.

One server is shared by the tests of this module (it needs ~30 s to get ready and a core while idle) and is
removed when the module ends, so at most one real vLLM of ours runs at a time.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import requests

from supervisor.adapters.docker_adapter import until_reaped
from tests.harness import TEST_LABEL, free_port, unique_name, wait_for
from tools.realvllm import READY_LINE, SERVED_MODEL_NAME, RealVllmPaths, server_argv, volumes

pytestmark = [pytest.mark.real_vllm, pytest.mark.docker, pytest.mark.slow]

READY_TIMEOUT_S = 240


@dataclass(frozen=True)
class RealVllm:
    """A running real vLLM container and how to talk to it."""

    container_id: str
    base_url: str
    api_key: str
    ready_s: float

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


def _logs(client: docker.DockerClient, container_id: str) -> str:
    raw: bytes = client.containers.get(container_id).logs()
    return raw.decode("utf-8", errors="replace")


def _ready_line_seen(client: docker.DockerClient, container_id: str) -> bool:
    """True once the ready line is logged; raises if the container exited first (no point waiting)."""
    container = client.containers.get(container_id)
    if container.status == "exited":
        tail = "\n".join(_logs(client, container_id).splitlines()[-25:])
        raise AssertionError(f"real vLLM exited before ready:\n{tail}")
    return READY_LINE in _logs(client, container_id)


@pytest.fixture(scope="module")
def real_vllm(
    docker_client: docker.DockerClient, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> Iterator[RealVllm]:
    """One real vLLM server (tiny model, API key set) on a free 127.0.0.1 port; removed afterwards."""
    paths = RealVllmPaths(*real_vllm_paths)
    api_key = secrets.token_urlsafe(24)
    port = free_port()
    name = unique_name("real-vllm")
    started = time.monotonic()
    container = docker_client.containers.run(
        base_image,
        server_argv(paths.venv),
        name=name,
        detach=True,
        labels={TEST_LABEL: f"real-vllm-{name}"},
        shm_size="1g",
        ports={"8000/tcp": ("127.0.0.1", port)},
        environment={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_API_KEY": api_key},
        volumes=volumes(paths),
    )
    try:
        cid = str(container.id)
        wait_for(
            lambda: _ready_line_seen(docker_client, cid),
            timeout=READY_TIMEOUT_S,
            interval=0.5,
            message=f"{READY_LINE!r} in the real vLLM log",
        )
        yield RealVllm(cid, f"http://127.0.0.1:{port}", api_key, time.monotonic() - started)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            found = docker_client.containers.get(name)
            until_reaped(lambda: found.remove(force=True, v=True))


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


def test_ready_from_log_line_and_health(real_vllm: RealVllm, docker_client: docker.DockerClient) -> None:
    """The real server logs the ready line, and /health answers 200 without the key."""
    assert READY_LINE in _logs(docker_client, real_vllm.container_id)
    status = wait_for(
        lambda: requests.get(f"{real_vllm.base_url}/health", timeout=5).status_code == 200,
        timeout=30,
        message="/health 200",
    )
    assert status is True  # (ready_s < READY_TIMEOUT_S is the fixture's own guarantee: not asserted again)


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

"""What the real-vLLM measuring tools (tools/frozen_engine.py, tools/progress_probe.py) share: one labelled
real vLLM CPU container on a free 127.0.0.1 port with its own API key, its EngineCore / API-server pids,
and the sums of the ``/metrics`` series they sample (parsed by supervisor/core/vllm/metrics.py)."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import docker
import docker.models.containers

from supervisor.core.vllm.metrics import parse_prometheus
from tools.images import BASE_LOCAL
from tools.ports import free_port

LABEL = "vllm-supervisor.test"
MEMLOCK = 8388608


def series_sums(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The named series' values, summed over label sets, of a Prometheus text exposition."""
    parsed = parse_prometheus(text)
    return {n: sum(s.value for s in parsed[n]) for n in names if n in parsed}


@dataclass
class Started:
    container: docker.models.containers.Container
    url: str
    key: str


def start_real(
    client: docker.DockerClient,
    argv: list[str],
    *,
    prefix: str,
    label: str,
    volumes: dict[str, dict[str, str]],
    kv_space_gib: int = 1,
    env: dict[str, str] | None = None,
) -> Started:
    """One real vLLM CPU container (base image, venv and model mounted read-only), detached."""
    port, key = free_port(), secrets.token_urlsafe(24)
    container = client.containers.run(
        BASE_LOCAL,
        argv,
        name=f"{prefix}-{uuid.uuid4().hex[:8]}",
        detach=True,
        labels={LABEL: label},
        shm_size="1g",
        ports={"8000/tcp": ("127.0.0.1", port)},
        environment={"VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib), "VLLM_API_KEY": key, **(env or {})},
        volumes=volumes,
        ulimits=[docker.types.Ulimit(name="memlock", soft=MEMLOCK, hard=MEMLOCK)],
    )
    return Started(container, f"http://127.0.0.1:{port}", key)


def core_pids(container: Any) -> tuple[int, int]:
    """Host pids of the ``EngineCore`` and the API-server processes (``docker top -eo pid,args``; 0: none)."""
    engine = api = 0
    for proc in container.top(ps_args="-eo pid,args")["Processes"]:
        if "EngineCore" in proc[1]:
            engine = int(proc[0])
        elif "api_server" in proc[1] and not api:
            api = int(proc[0])
    return engine, api

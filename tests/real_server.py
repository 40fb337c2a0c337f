"""The tiny real vLLM CPU server the read-only real-vLLM modules share (tests/test_real_vllm.py, the
smoke gates of tests/test_real_vllm_gates.py): one load per run instead of one per module (each load is
~23 s of a core, its engine core started by fork: tools/overlays/fork). Its tests only read from it
(requests, /metrics, the log); a test that stops, freezes or re-creates a server starts its own. The
``real_vllm`` fixture (tests/conftest.py) is session-scoped, and the sharing modules are dealt to one
xdist group (``REAL_VLLM_SHARED_SERVER``), so one worker makes it once."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from supervisor.adapters.docker.errors import until_reaped
from tests.harness import TEST_LABEL, free_port, unique_name, wait_for
from tools.realvllm import READY_LINE, RealVllmPaths, engine_env, server_argv, volumes

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


def serve(
    docker_client: docker.DockerClient, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> Iterator[RealVllm]:
    """One real vLLM server (tiny model, API key set) on a free 127.0.0.1 port; removed afterwards (its
    killed process is waited for: ``until_reaped``)."""
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
        environment=engine_env({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_API_KEY": api_key}),
        volumes=volumes(paths, fork=True),
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

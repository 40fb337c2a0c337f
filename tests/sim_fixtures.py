"""A handle on one running simulator container for tests.

The ``sim_image`` fixture is in tests/conftest.py; use ``start_sim(client, resources, env=..., args=...)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import docker
import docker.models.containers
import requests

from supervisor.sim.launch import sim_run_kwargs
from tests.harness import free_port, wait_for

ANSI = re.compile(r"(?:\x1b)?\[[0-9;]{1,8}m")


@dataclass
class SimHandle:
    """One simulator container published on 127.0.0.1:port."""

    container: docker.models.containers.Container
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **kw: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=kw.pop("timeout", 5), **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return requests.post(self.url + path, timeout=kw.pop("timeout", 5), **kw)

    def logs(self) -> str:
        """stdout + stderr so far, ANSI colour codes and carriage returns removed."""
        raw = self.container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return ANSI.sub("", raw).replace("\r", "")

    def stdout(self) -> str:
        raw = self.container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        return ANSI.sub("", raw).replace("\r", "")

    def wait_log(self, pattern: str, timeout: float = 15) -> re.Match[str]:
        rx = re.compile(pattern)
        return wait_for(lambda: rx.search(self.logs()), timeout, 0.1, f"log line /{pattern}/")

    def health_code(self) -> int | None:
        """HTTP status of /health, or None when nothing answers (refused/reset while loading)."""
        try:
            return self.get("/health", timeout=2).status_code
        except requests.RequestException:
            return None

    def wait_ready(self, timeout: float = 20) -> None:
        wait_for(lambda: self.health_code() == 200, timeout, 0.1, "simulator /health 200")

    def wait_exit(self, timeout: float = 20) -> int:
        """Wait for the container to exit; its exit code."""

        def exited() -> int | None:
            self.container.reload()
            if self.container.status == "exited":
                return int(self.container.attrs["State"]["ExitCode"]) + 1000  # truthy even for 0
            return None

        return wait_for(exited, timeout, 0.1, "simulator container exit") - 1000


def start_sim(
    client: docker.DockerClient,
    resources: Any,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
    stem: str = "sim",
) -> SimHandle:
    """Run the sim image as a labelled, auto-cleaned container on a free 127.0.0.1 port."""
    port = free_port()
    kwargs = sim_run_kwargs(resources.name(stem), port, resources.labels, env=env, args=args)
    container = client.containers.run(**kwargs)
    return SimHandle(container, port)

"""Fixtures shared by every test: a real Docker client, per-test names/labels, forced cleanup, fake clock."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from supervisor.core.clock import FakeClock
from tests.harness import TEST_LABEL, WebhookReceiver, socket_dir, unique_name, webhook_receiver
from tests.sim_world import World
from tools.images import base_image_tag, ensure_base_image

#: xdist group of the tests that start a real vLLM CPU server: one at a time in a run (each idles at a
#: full core of this 2-core box and needs 2-3 GB), on one worker while the others run the rest.
REAL_VLLM_GROUP = "real_vllm"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every ``real_vllm`` test joins :data:`REAL_VLLM_GROUP` (``--dist loadgroup``: one worker runs them)."""
    for item in items:
        if item.get_closest_marker("real_vllm") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(REAL_VLLM_GROUP))


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock that moves only when the test advances it."""
    return FakeClock()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """A client of the real Docker engine (the test command starts one); fails loudly if it is absent."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Docker engine not reachable ({exc}); run the README test command, which starts it")
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client: docker.DockerClient) -> str:
    """Tag of the offline-built Debian base image (built once if missing)."""
    tag = os.environ.get("VSUP_BASE_IMAGE") or base_image_tag()
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        tag = ensure_base_image()
    return tag


class Resources:
    """Names and labels for one test, and the list of things to force-remove afterwards."""

    def __init__(self, client: docker.DockerClient, test_id: str) -> None:
        self.client = client
        self.test_id = test_id
        self.labels = {TEST_LABEL: test_id}
        self.containers: list[str] = []

    def name(self, stem: str = "") -> str:
        """A unique container name, registered for cleanup."""
        n = unique_name(stem)
        self.containers.append(n)
        return n

    def track(self, name_or_id: str) -> None:
        """Register a container created some other way for cleanup."""
        self.containers.append(name_or_id)

    def cleanup(self) -> None:
        for ref in self.containers:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.containers.get(ref).remove(force=True, v=True)
        for c in self.client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={self.test_id}"}):
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True, v=True)


@pytest.fixture
def resources(docker_client: docker.DockerClient, request: pytest.FixtureRequest) -> Iterator[Resources]:
    """Per-test names + label; everything registered or labelled is force-removed even if the test fails."""
    res = Resources(docker_client, unique_name(request.node.name)[len("vsup-test-") :])
    try:
        yield res
    finally:
        res.cleanup()


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    """A real HTTP receiver on 127.0.0.1 recording every request."""
    with webhook_receiver() as recv:
        yield recv


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short, world-traversable directory for Unix sockets, removed after the test."""
    with socket_dir() as d:
        yield d


# --- real vLLM fixtures (engineer A) ---
# The real vLLM CPU environment (tools/realvllm.py): built once per recipe, cached outside the checkout.
# (Imports kept in this block so the rest of the file stays untouched.)

from tools.realvllm import ensure as ensure_real_vllm  # noqa: E402


@pytest.fixture(scope="session")
def real_vllm_paths() -> tuple[Path, Path]:
    """(venv_dir, model_dir) of the real vLLM CPU environment, built first if missing (minutes, once)."""
    p = ensure_real_vllm()
    return p.venv, p.model


@pytest.fixture(scope="session")
def sim_image(base_image: str) -> str:
    """Tag of the simulator image, (re)built from the base image if its content hash changed."""
    from supervisor.sim.launch import IMAGE_ENV
    from tools.images import ensure_sim_image, sim_image_tag

    assert base_image
    tag = ensure_sim_image()
    assert tag == sim_image_tag(base_image)
    os.environ[IMAGE_ENV] = tag  # every simulator this session runs is the one built from these sources
    return tag


@pytest.fixture
def world(tmp_path: Path, resources: Resources, sim_image: str) -> Iterator[World]:
    """A daemon end-to-end test's world (daemons killed, containers removed afterwards)."""
    w = World(tmp_path, resources)
    try:
        yield w
    finally:
        w.close()

"""jobs.wait_docker against a real engine: answering at once, never answering, and coming back.

"Coming back" is the real Docker socket behind a relay that only starts listening after a while (the
daemon's view of a dockerd restart: connection refused, then answers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.core.events import DockerAnswered
from supervisor.daemon.executor.jobs import wait_docker
from tests.docker_relay import DOCKER_SOCK, relay


@pytest.fixture
def engine() -> DockerAdapter:
    if not Path(DOCKER_SOCK).exists():
        pytest.fail("the Docker engine's socket is missing: run scripts/setup")
    return DockerAdapter()


def test_an_engine_that_answers_was_never_down(engine: DockerAdapter) -> None:
    assert wait_docker(engine, 2.0) == [DockerAnswered(ok=True, was_down=False)]


def test_an_engine_that_never_answers_gives_up_at_the_limit(tmp_path: Path) -> None:
    nobody = DockerAdapter(base_url=f"unix://{tmp_path / 'none.sock'}")
    assert wait_docker(nobody, 0.6) == [DockerAnswered(ok=False, was_down=True)]


def test_an_engine_coming_back_is_seen_answering(engine: DockerAdapter, tmp_path: Path) -> None:
    """Refused, refused, ... then the real engine answers through the relay: ok after having been down."""
    sock = tmp_path / "docker.sock"
    with relay(sock, after_s=0.8):
        answer = wait_docker(DockerAdapter(base_url=f"unix://{sock}"), 20.0)
    assert answer == [DockerAnswered(ok=True, was_down=True)]

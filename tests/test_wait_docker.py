"""jobs.wait_docker against a real engine: answering at once, never answering, and coming back.

"Coming back" is the real Docker socket behind a relay that only starts listening after a while (the
daemon's view of a dockerd restart: connection refused, then answers)."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.adapters.docker_adapter import DockerAdapter
from supervisor.core.events import DockerAnswered
from supervisor.daemon.jobs import wait_docker

DOCKER_SOCK = "/var/run/docker.sock"


class _Relay(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Pipe(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(DOCKER_SOCK)
        up.settimeout(10)
        self.request.settimeout(10)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(up, self.request), daemon=True)
        back.start()
        pump(self.request, up)
        back.join(10)
        up.close()


@contextlib.contextmanager
def _late_relay(path: Path, after_s: float) -> Iterator[threading.Timer]:
    """A relay to the real Docker socket at ``path``, listening only ``after_s`` seconds from now."""
    servers: list[_Relay] = []

    def listen() -> None:
        srv = _Relay(str(path), _Pipe)
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    timer = threading.Timer(after_s, listen)
    timer.start()
    try:
        yield timer
    finally:
        timer.cancel()
        for srv in servers:
            srv.shutdown()
            srv.server_close()


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
    with _late_relay(sock, 0.8) as timer:
        answer = wait_docker(DockerAdapter(base_url=f"unix://{sock}"), 20.0)
        timer.join(5)
    assert answer == [DockerAnswered(ok=True, was_down=True)]

"""A relay to the real Docker socket on a Unix socket of the test's own: what the daemon sees of dockerd
when the test controls the line (coming up late, or every connection cut at once while the engine and its
containers go on)."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

DOCKER_SOCK = "/var/run/docker.sock"


class DockerRelay(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Pipes each connection to the real Docker socket; ``cut()`` breaks the open ones."""

    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.live: list[socket.socket] = []
        super().__init__(path, _Pipe)

    def cut(self) -> int:
        """Close every connection now open (the streams break; new connections are accepted)."""
        n = 0
        for s in list(self.live):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
                n += 1
        self.live.clear()
        return n


class _Pipe(socketserver.BaseRequestHandler):
    server: DockerRelay

    def handle(self) -> None:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(DOCKER_SOCK)
        self.server.live += [up, self.request]

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
def relay(path: Path, after_s: float = 0.0) -> Iterator[list[DockerRelay]]:
    """A relay at ``path``, listening ``after_s`` seconds from now (the list holds it once it listens)."""
    servers: list[DockerRelay] = []

    def listen() -> None:
        srv = DockerRelay(str(path))
        servers.append(srv)
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    timer = threading.Timer(after_s, listen)
    if after_s > 0:
        timer.start()
    else:
        listen()
    try:
        yield servers
    finally:
        timer.cancel()
        for srv in servers:
            srv.shutdown()
            srv.cut()
            srv.server_close()

"""The metrics endpoint's bounded HTTP server against real sockets on 127.0.0.1: a flood of idle
connections, trickling clients and a squatted port never take the endpoint (or the daemon) down."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
from collections.abc import Iterator

import pytest
import requests

from supervisor.adapters.metrics.endpoint import MetricsServer
from supervisor.adapters.metrics.server import MAX_CONNECTIONS, BoundedHTTPServer
from tests.harness import free_port, trickle_until_closed, wait_for


def _render(path: str) -> tuple[int, str, bytes]:
    return (200, "text/plain", b"up 1\n") if path == "/metrics" else (404, "text/plain", b"no\n")


@contextlib.contextmanager
def serving(**kw: float) -> Iterator[BoundedHTTPServer]:
    server = BoundedHTTPServer("127.0.0.1", 0, _render, **kw)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _idle(port: int, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(s)
    return out


def test_answers_a_scrape_and_closes() -> None:
    with serving() as server:
        r = requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        assert (r.status_code, r.text, r.headers["Connection"]) == (200, "up 1\n", "close")
        assert requests.get(f"http://127.0.0.1:{server.port}/other", timeout=5).status_code == 404
        assert requests.post(f"http://127.0.0.1:{server.port}/metrics", timeout=5).status_code == 405


def test_a_thousand_idle_connections_hold_at_most_the_cap_and_scrapes_still_answer() -> None:
    """1,000 idle loopback connections: the server keeps at most twice MAX_CONNECTIONS open (the cap, and
    new ones in their grace; the others are closed, idle ones first), and a scrape sent among them is
    answered."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2200:
        pytest.skip(f"this test needs ~2,100 descriptors (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2200), hard))
    socks: list[socket.socket] = []
    try:
        with serving() as server:
            socks = _idle(server.port, 1000)
            wait_for(lambda: server.dropped >= 1000 - 2 * MAX_CONNECTIONS, 30, message="the cap enforced")
            assert server.open_connections <= 2 * MAX_CONNECTIONS  # the cap, and new ones in their grace
            r = requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
            assert r.status_code == 200
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_trickling_client_is_closed_at_its_deadline() -> None:
    """A client sending one byte a second never completes its request: closed after the deadline."""
    with serving(request_deadline_s=1.0) as server:
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with contextlib.closing(s):
            closed = trickle_until_closed(s, b"G", 10, every_s=1.0)
            assert closed
            assert server.dropped >= 1


def test_an_oversized_request_is_refused() -> None:
    with serving() as server, socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000)
        assert s.recv(64).startswith(b"HTTP/1.1 413")


def test_a_squatted_port_is_a_retry_not_a_crash() -> None:
    """start_retrying on a port another socket holds returns (no exception), and serves once it is free."""
    port = free_port()
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen(1)
    metrics = MetricsServer(f"127.0.0.1:{port}", lambda: {"profiles": []}, meminfo=None)
    try:
        metrics.start_retrying(every_s=0.2)
        assert not metrics.serving
        squatter.close()
        wait_for(lambda: metrics.serving, 10, message="the endpoint bound after the squatter left")
        assert requests.get(metrics.url, timeout=5).status_code == 200
    finally:
        squatter.close()
        metrics.stop()


def test_scrapes_are_answered_during_a_connect_flood() -> None:
    """A local user keeps opening connections (1,000, held) while Prometheus scrapes: the flood evicts its
    own idle connections, never a scrape (issue 39 item 9), not even one whose request comes milliseconds
    after its connect (1 of 36,911 scrapes was lost so when any idle connection went at twice the cap)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2200:
        pytest.skip(f"this test needs ~2,100 descriptors (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2200), hard))
    socks: list[socket.socket] = []
    flooding = threading.Event()
    try:
        with serving() as server:

            def flood() -> None:
                flooding.set()
                for _ in range(1000):
                    with contextlib.suppress(OSError):
                        socks.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))

            flooder = threading.Thread(target=flood, daemon=True)
            flooder.start()
            flooding.wait(5)
            answered: list[bool] = []
            while flooder.is_alive() or len(answered) < 20:
                with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                    reply = b""
                    with contextlib.suppress(OSError):
                        while chunk := s.recv(4096):
                            reply += chunk
                answered.append(reply.endswith(b"up 1\n"))
            flooder.join(30)
            assert all(answered), f"{answered.count(False)} of {len(answered)} scrapes lost"
            assert len(socks) > 2 * MAX_CONNECTIONS  # the flood was there: more than the server holds
            # every flood connection is taken from the listen backlog, then held or closed (once the
            # server drained it: a count read at once missed the backlog, 892 of 1,000 in one run)
            wait_for(
                lambda: server.dropped + server.open_connections >= len(socks),
                30,
                message="the backlog taken",
            )
            assert server.open_connections <= 2 * MAX_CONNECTIONS  # the cap, and new ones in their grace
            assert server.dropped >= len(socks) - 2 * MAX_CONNECTIONS  # the rest closed: capped
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

"""The probes' light HTTP path (supervisor/adapters/vllm/lighthttp.py) against real servers on 127.0.0.1: what
it hands back to ``requests`` (https, a redirect to follow), a connection per request, and the failures a
stream can end in. The everyday answers (200, 503, refused, timeout, /metrics, the canary) are in
tests/test_probes.py, which now runs through this path."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress

import pytest

from supervisor.adapters.vllm import lighthttp
from supervisor.adapters.vllm.lighthttp import StreamFailed
from supervisor.adapters.vllm.probes import check_health, check_url, sse_chunks
from tests.harness import free_port

#: A timeout that only stops a hang: these tests check what the answer is, not how fast it comes (a 2 s one
#: ran out once in CI, with four workers and two real-vLLM loads on the box's two cores).
HANG_S = 30.0

#: Handles one accepted connection (the request bytes already read up to the blank line).
Reply = Callable[[socket.socket, bytes], None]


def _request_length(data: bytes) -> int:
    """The bytes of the request ``data`` begins: its head and its Content-Length body."""
    head, sep, _ = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(head) + len(sep) + int(value.strip())
    return len(head) + len(sep)


@pytest.fixture
def raw_server() -> Iterator[Callable[[Reply], str]]:
    """A raw TCP server on 127.0.0.1 whose every connection is answered by the given function."""
    socks: list[socket.socket] = []
    stop = threading.Event()

    def start(reply: Reply) -> str:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        srv.settimeout(0.2)
        socks.append(srv)

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                with conn:
                    conn.settimeout(5)
                    data = b""
                    while b"\r\n\r\n" not in data or len(data) < _request_length(data):
                        got = conn.recv(65536)
                        if not got:
                            break
                        data += got
                    # the whole request is read first: a socket closed with a request body unread sends a
                    # reset, which the client may read before the answer (seen: ConnectionResetError)
                    with suppress(OSError):
                        reply(conn, data)

        threading.Thread(target=loop, daemon=True).start()
        return f"http://127.0.0.1:{srv.getsockname()[1]}"

    yield start
    stop.set()
    for s in socks:
        s.close()


def _answer(status: str, headers: str, body: bytes) -> Reply:
    """An HTTP/1.1 answer that says the server closes the connection after it (it does): without the header
    ``requests`` may send the redirect's second request on the closed connection before the close reaches it
    ("connection error" once in a loaded run, 2026-12-04)."""

    def reply(conn: socket.socket, _req: bytes) -> None:
        head = f"HTTP/1.1 {status}\r\n{headers}Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode() + body)

    return reply


def test_every_request_asks_for_its_own_connection(raw_server: Callable[[Reply], str]) -> None:
    """`Connection: close` on every request: no kept connection can reach a container that died since."""
    seen: list[bytes] = []

    def reply(conn: socket.socket, req: bytes) -> None:
        seen.append(req)
        _answer("200 OK", "", b"")(conn, req)

    url = raw_server(reply)
    assert check_health(url, HANG_S).ok
    assert check_health(url, HANG_S).ok
    assert len(seen) == 2
    assert all(b"Connection: close" in r for r in seen)


def test_a_redirect_is_followed_through_requests_unless_told_not_to(
    raw_server: Callable[[Reply], str],
) -> None:
    """/health redirecting to /ok: the light path hands over to ``requests``, which follows it; a companion
    check (``redirects=False``) sees the 302 itself."""
    holder: dict[str, str] = {}

    def reply(conn: socket.socket, req: bytes) -> None:
        if req.startswith(b"GET /ok "):
            _answer("200 OK", "", b"fine")(conn, req)
        else:
            _answer("302 Found", f"Location: {holder['url']}/ok\r\n", b"")(conn, req)

    holder["url"] = raw_server(reply)
    followed = check_url(holder["url"] + "/health", HANG_S)
    assert (followed.ok, followed.status, followed.error) == (True, 200, None)
    kept = check_url(holder["url"] + "/health", HANG_S, expect_status=302, redirects=False)
    assert (kept.ok, kept.status, kept.error) == (True, 302, None)


def test_https_goes_through_requests() -> None:
    """Not plain HTTP: ``requests`` answers, with the same short words (nothing listens: refused)."""
    url = f"https://127.0.0.1:{free_port()}"
    assert not lighthttp.supports(url)
    res = check_health(url, HANG_S)
    assert (res.ok, res.status, res.error) == (False, None, "connection refused")


def test_a_server_that_hangs_up_without_answering_is_a_connection_error(
    raw_server: Callable[[Reply], str],
) -> None:
    url = raw_server(lambda conn, _req: conn.shutdown(socket.SHUT_RDWR))
    res = check_health(url, HANG_S)
    assert (res.ok, res.status, res.error) == (False, None, "connection error")


def test_a_chunked_stream_yields_its_chunks_then_done(raw_server: Callable[[Reply], str]) -> None:
    """vLLM streams with chunked transfer: each `data:` line a JSON object, then [DONE]."""

    def reply(conn: socket.socket, _req: bytes) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for part in (b'data: {"choices": [{"delta": {}}]}\n\n', b": keep-alive\n\n", b"data: [DONE]\n\n"):
            conn.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        conn.sendall(b"0\r\n\r\n")

    url = raw_server(reply)
    with closing(
        sse_chunks(url + "/v1/chat/completions", {"stream": True}, "k", HANG_S, time.monotonic())
    ) as s:
        assert list(s) == [{"choices": [{"delta": {}}]}, None]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"data: not json\n\n", "answer is not the expected JSON"),
        (b"data: [1, 2]\n\n", "answer is not the expected JSON"),
    ],
)
def test_a_chunk_that_is_not_a_json_object_fails_the_stream(
    raw_server: Callable[[Reply], str], body: bytes, error: str
) -> None:
    url = raw_server(_answer("200 OK", "", body))
    with (
        pytest.raises(StreamFailed) as err,
        closing(sse_chunks(url, {}, None, HANG_S, time.monotonic())) as s,
    ):
        list(s)
    assert (err.value.status, err.value.error) == (200, error)


def test_a_stream_that_never_finishes_ends_at_its_deadline(raw_server: Callable[[Reply], str]) -> None:
    """A server that keeps sending comments but no token: the whole stream is bounded by ``timeout``."""
    done = threading.Event()

    def reply(conn: socket.socket, _req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for _ in range(200):  # bounded: 20 s at most
            if done.wait(0.1):
                return
            conn.sendall(b": keep-alive\n\n")

    url = raw_server(reply)
    try:
        with (
            pytest.raises(StreamFailed) as err,
            closing(sse_chunks(url, {}, None, 1.0, time.monotonic())) as s,
        ):
            list(s)
    finally:
        done.set()
    assert (err.value.status, err.value.error) == (200, "timeout (stream not finished)")


def test_a_refused_stream_has_no_status() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/completions"
    with (
        pytest.raises(StreamFailed) as err,
        closing(sse_chunks(url, {}, None, HANG_S, time.monotonic())) as s,
    ):
        list(s)
    assert (err.value.status, err.value.error) == (None, "connection refused")

"""Shared test helpers: polling with deadlines, free ports, unique names, a webhook receiver.

No fixed sleeps anywhere: :func:`wait_for` polls a predicate until it holds or a deadline passes.

The suite runs on several pytest-xdist workers at once, next to other test runs on the same Docker engine
and kernel (docs/testing.md "Running in parallel"): whatever a test makes on the host is its own. Names come
from :func:`unique_name` (containers, cgroups, kernel-log tokens), TCP ports from :func:`free_port`
(the OS picks), directories from ``tmp_path`` / :func:`socket_dir`, never a fixed value.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tools.ports import free_port as free_port  # re-exported: the tests take their ports from here

T = TypeVar("T")

#: Every Docker object a test creates carries this label key, so leftovers can be found and removed.
TEST_LABEL = "vllm-supervisor.test"
#: Prefix of every container name made by tests.
NAME_PREFIX = "vsup-test-"
#: The checkout root (cwd for subprocesses that import the package).
REPO = Path(__file__).resolve().parent.parent
#: argv prefix that runs the rest of the command as user nobody (only works as root).
AS_NOBODY: tuple[str, ...] = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")


class WaitTimeout(AssertionError):
    """A polled condition did not become true in time."""


class GiveUp(AssertionError):
    """Raised by a predicate when waiting longer is pointless (e.g. the process under test died)."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    interval: float = 0.1,
    message: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value; return that value or raise WaitTimeout."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except GiveUp:
            raise
        except Exception as exc:  # noqa: BLE001 - a predicate may fail until the thing is up
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message}{detail}")
        time.sleep(interval)


def worker_id() -> str:
    """This pytest-xdist worker's id (``gw0``, ``gw1`` ...), ``main`` when the run is not distributed."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def unique_name(stem: str = "") -> str:
    """A unique, recognisable container name for one test."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in stem)[:30].strip("-")
    return f"{NAME_PREFIX}{stem}-{uuid.uuid4().hex[:8]}" if stem else f"{NAME_PREFIX}{uuid.uuid4().hex[:8]}"


def python_as_nobody(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` as user nobody in the checkout (the caller skips unless root)."""
    return subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


@contextmanager
def socket_dir(prefix: str = "vsup-sock-") -> Iterator[Path]:
    """A short, world-traversable directory for Unix sockets (pytest's tmp_path is 0700 and long)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


@dataclass
class Received:
    """One request the webhook receiver got."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class WebhookReceiver:
    """A real HTTP server on 127.0.0.1 that records every request and answers with a set status."""

    host: str = "127.0.0.1"
    port: int = 0
    status: int = 200
    response_body: bytes = b'{"ok": true}'
    requests: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.requests)

    def wait_for_count(self, n: int, timeout: float = 10.0) -> list[Received]:
        return wait_for(
            lambda: self.received() if len(self.received()) >= n else None,
            timeout,
            message=f"{n} webhook requests",
        )


@contextmanager
def webhook_receiver(status: int = 200) -> Iterator[WebhookReceiver]:
    """Run a :class:`WebhookReceiver` for the duration of the block."""
    recv = WebhookReceiver(status=status)

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with recv._lock:
                recv.requests.append(
                    Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            self.send_response(recv.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(recv.response_body)))
            self.end_headers()
            self.wfile.write(recv.response_body)

        do_POST = _handle  # noqa: N815
        do_GET = _handle  # noqa: N815
        do_PUT = _handle  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((recv.host, 0), Handler)
    recv.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield recv
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def container_cgroup(container_id: str) -> Iterator[Path]:
    """A real cgroup in Docker's own shape for ``container_id`` (``/docker/<id>``, the cgroupfs driver's),
    removed afterwards: a process moved into it is, to /proc/PID/cgroup, a process of that container."""
    candidates = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")]
    base = next((c for c in candidates if (c / "cgroup.procs").exists() and os.access(c, os.W_OK)), None)
    if base is None:
        pytest.skip("no writable cgroup hierarchy here (needs root)")
    parent = base / "docker"
    made_parent = not parent.exists()
    parent.mkdir(exist_ok=True)
    group = parent / container_id
    group.mkdir()
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (base / "cgroup.procs").write_text(pid)
        group.rmdir()
        if made_parent:
            with contextlib.suppress(OSError):  # another test's group may be in it still
                parent.rmdir()


def trickle_until_closed(sock: socket.socket, byte: bytes, limit_s: float, every_s: float = 0.5) -> bool:
    """Send ``byte`` every ``every_s`` (a request that never completes) until the server closes the
    connection (True) or ``limit_s`` passes (False).

    A server that closes while some trickled bytes are still unread in its socket makes the kernel send
    a reset, not an end of stream: the next recv raises ECONNRESET. That is the close too."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            sock.sendall(byte)
        except OSError:
            return True
        sock.settimeout(every_s)
        try:
            if sock.recv(1) == b"":
                return True
        except TimeoutError:  # (a subclass of OSError: caught first) nothing yet, trickle on
            continue
        except OSError:  # reset by the server
            return True
    return False


@contextmanager
def interned_names() -> Iterator[list[str]]:
    """The names ``sys.intern`` is asked for inside the block. Python 3.11's pathlib calls it for every part
    of every path it builds (the churn adapters/host/cputime.py describes), so a hot path that builds paths
    from
    ids shows here. Only ``sys.intern`` is put back at the end (a test's other patches stay)."""
    names: list[str] = []
    real_intern = sys.intern

    def record(s: str) -> str:
        names.append(s)
        return real_intern(s)

    sys.intern = record
    try:
        yield names
    finally:
        sys.intern = real_intern

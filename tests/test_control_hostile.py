"""Hostile clients of the control socket (real Unix socket server in this process, clients as nobody):
they cost only their own slots, never root's, never the server's life."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.control.server import MAX_PER_USER, REQUEST_DEADLINE_S, ControlServer
from supervisor.daemon.api import MAX_RECORDS, record_count
from tests.harness import AS_NOBODY, REPO, trickle_until_closed, wait_for


def _echo(request: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "data": {"cmd": request["cmd"], "uid": request["peer"]["uid"]}}


@pytest.fixture
def server(sock_dir: Path) -> Iterator[ControlServer]:
    """Mode 0660, group nogroup: user nobody (in nogroup) may connect, as a member of the socket group."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run clients as nobody")
    sock_dir.chmod(0o755)
    srv = ControlServer(sock_dir / "control.sock", _echo, mode=0o660, group="nogroup")
    srv.start()
    yield srv
    srv.stop()


HOLD = """
import socket, sys, time
socks = []
for i in range({n}):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect({path!r})
        s.send(b'{{"cmd": "sta')  # a request that never ends
    except OSError:
        pass  # refused (busy) and closed by the server: counted by the server, not here
    socks.append(s)
print("holding", flush=True)
time.sleep({hold})
"""


def test_forty_slow_clients_of_one_user_leave_root_served(server: ControlServer) -> None:
    """Nobody opens 40 connections that trickle half a request: at most MAX_PER_USER are served, the rest
    refused at once, and root's call is answered while they hold on."""
    code = HOLD.format(n=40, path=str(server.path), hold=8)
    holder = subprocess.Popen(
        [*AS_NOBODY, sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == b"holding", holder.stderr.read() if holder.stderr else ""
        reply = ControlClient(server.path, timeout=5).call("status")
        assert reply == {"ok": True, "data": {"cmd": "status", "uid": 0}, "error": None}
        assert server._open.get(65534, 0) <= MAX_PER_USER
    finally:
        holder.kill()
        holder.wait(10)


def test_a_trickling_client_loses_its_slot_at_the_deadline(server: ControlServer) -> None:
    """One byte every 0.5 s never completes a request: the server closes it after REQUEST_DEADLINE_S."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(server.path))
        closed = trickle_until_closed(s, b" ", REQUEST_DEADLINE_S + 10)
        assert closed
    wait_for(lambda: not server._open, 5, message="the slot given back")


@pytest.mark.parametrize(
    "line",
    [
        b'{"cmd": "status", "args": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
        b'{"cmd": "status", "args": {"a": ' + b"[" * 20 + b"]" * 20 + b"}}\n",
        b"\xff\xfe\n",
        b'{"cmd": "status", "args": {"n": 1e999999}}\n',
    ],
    ids=["5000-deep", "20-deep", "not-utf8", "huge-number"],
)
def test_malformed_json_is_an_error_answer_not_a_dead_thread(server: ControlServer, line: bytes) -> None:
    """Deep nesting, bad bytes, absurd numbers: a 'malformed request' (or a normal) answer, and the next
    call on the same server works."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(server.path))
        s.sendall(line)
        answer = s.recv(65536)
    reply = json.loads(answer)
    assert "ok" in reply
    if b"[" * 20 in line or b"\xff" in line:
        assert reply["ok"] is False
        assert reply["error"].startswith("malformed request")
    assert ControlClient(server.path, timeout=5).call("status")["ok"] is True


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 50),
        (7, 7),
        ("12", 12),
        (MAX_RECORDS, MAX_RECORDS),
        (MAX_RECORDS + 1, None),
        (0, None),
        (-3, None),
        ("x", None),
        (True, None),
        (1.5, None),
        ([1], None),
    ],
)
def test_events_n_is_bounded(raw: object, expected: int | None) -> None:
    """`events -n` / `history -n`: a whole number 1..MAX_RECORDS, else refused."""
    assert record_count(raw) == expected


def _leaky(request: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError(
        "webhook https://hooks.example/send?access_token=tok-0123456789abcdef refused; key sk-known-secret-1"
    )


def test_an_internal_error_answer_is_masked(sock_dir: Path) -> None:
    """A handler bug whose exception quotes a secret: the 'internal error' answer is built inside the
    redaction (the secret shapes by default, the daemon's SecretBook when wired)."""
    from supervisor.adapters.secrets import SecretBook

    book = SecretBook()
    book.learn(["sk-known-secret-1"])
    for redact in ({}, {"redact": book.text}):
        srv = ControlServer(sock_dir / "leak.sock", _leaky, **redact)  # type: ignore[arg-type]
        srv.start()
        try:
            reply = ControlClient(srv.path, timeout=5).call("status")
        finally:
            srv.stop()
        assert reply["ok"] is False
        assert reply["error"].startswith("internal error in status: RuntimeError")
        assert "tok-0123456789abcdef" not in reply["error"]
        if redact:
            assert "sk-known-secret-1" not in reply["error"]

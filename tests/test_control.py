"""Tests of the control socket: a real Unix socket server and client in this process (and as nobody)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.control.server import ControlServer
from supervisor.adapters.store.state import Store
from supervisor.core.errors import ControlError
from supervisor.core.operator_events import ResetRequested
from supervisor.daemon.api import ControlApi
from supervisor.daemon.inbox import Inbox
from tests.harness import python_as_nobody


def echo_handler(request: dict[str, Any]) -> dict[str, Any]:
    """Answer with what was asked; fail on purpose for cmd 'boom'."""
    if request["cmd"] == "boom":
        raise RuntimeError("kaboom")
    if request["cmd"] == "bad":
        return {"nope": 1}
    return {"ok": True, "data": {"cmd": request["cmd"], "args": request["args"], "peer": request["peer"]}}


@pytest.fixture
def server(sock_dir: Path) -> Iterator[ControlServer]:
    """A running server with the echo handler."""
    srv = ControlServer(sock_dir / "control.sock", echo_handler)
    srv.start()
    yield srv
    srv.stop()


def test_round_trip_with_args_and_peer(server: ControlServer) -> None:
    """A call reaches the handler with its args and the caller's credentials, and the answer comes back."""
    reply = ControlClient(server.path).call("stop", name="m1", now=True)
    assert reply["ok"] is True
    assert reply["error"] is None
    assert reply["data"]["cmd"] == "stop"
    assert reply["data"]["args"] == {"name": "m1", "now": True}
    assert reply["data"]["peer"] == {"pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid()}


def test_socket_mode_and_group(sock_dir: Path) -> None:
    """The socket gets exactly the requested mode and group."""
    group = grp.getgrgid(os.getgid() if os.getgid() != 0 else 65534).gr_name
    srv = ControlServer(sock_dir / "c.sock", echo_handler, mode=0o660, group=group)
    srv.start()
    try:
        st = os.stat(srv.path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert grp.getgrgid(st.st_gid).gr_name == group
    finally:
        srv.stop()
    assert not srv.path.exists()


@pytest.mark.parametrize("mode", [0o600, 0o660])
def test_socket_never_more_permissive_and_umask_restored(sock_dir: Path, mode: int) -> None:
    """The socket gets exactly ``mode`` even under a permissive umask, which is restored afterwards."""
    old = os.umask(0)
    try:
        srv = ControlServer(sock_dir / f"m{mode:o}.sock", echo_handler, mode=mode)
        srv.start()
        try:
            assert stat.S_IMODE(os.stat(srv.path).st_mode) == mode
            assert os.umask(0) == 0
        finally:
            srv.stop()
    finally:
        os.umask(old)


def test_unknown_group_refused(sock_dir: Path) -> None:
    """A socket group that does not exist is a clear ControlError."""
    with pytest.raises(ControlError, match="does not exist"):
        ControlServer(sock_dir / "c.sock", echo_handler, group="no-such-group-xyz").start()


def test_handler_exception_becomes_error_and_server_survives(server: ControlServer) -> None:
    """A raising handler yields ok=false with the reason; the next call still works."""
    client = ControlClient(server.path)
    reply = client.call("boom")
    assert reply["ok"] is False
    assert "kaboom" in reply["error"]
    assert "without 'ok'" in client.call("bad")["error"]
    assert client.call("status")["ok"] is True


def _raw(path: Path, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(payload)
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    result: dict[str, Any] = json.loads(buf)
    return result


def test_malformed_and_oversized_requests(server: ControlServer) -> None:
    """Garbage, wrong shapes and oversized lines get an error answer instead of a crash."""
    assert "malformed" in _raw(server.path, b"not json\n")["error"]
    assert "malformed" in _raw(server.path, b'{"args": {}}\n')["error"]
    assert "args must be an object" in _raw(server.path, b'{"cmd": "x", "args": [1]}\n')["error"]
    assert "larger than" in _raw(server.path, b"x" * (70 * 1024))["error"]
    assert ControlClient(server.path).call("status")["ok"] is True


def test_several_requests_on_one_connection(server: ControlServer) -> None:
    """JSON lines: two requests on one connection get two answers in order."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(server.path))
        s.sendall(b'{"cmd": "a"}\n{"cmd": "b", "args": null}\n')
        f = s.makefile("rb")
        first, second = json.loads(f.readline()), json.loads(f.readline())
    assert (first["data"]["cmd"], second["data"]["cmd"]) == ("a", "b")


def test_silent_client_times_out_without_blocking_others(sock_dir: Path) -> None:
    """A client that connects and says nothing does not stop others being served."""
    srv = ControlServer(sock_dir / "t.sock", echo_handler, read_timeout_s=0.5)
    srv.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
            idle.connect(str(srv.path))
            assert ControlClient(srv.path, timeout=5).call("status")["ok"] is True
            idle.settimeout(5)
            assert idle.recv(10) == b""  # server closed the idle connection after its read timeout
    finally:
        srv.stop()


def test_second_server_refused_and_stale_socket_replaced(server: ControlServer) -> None:
    """A live socket is never stolen; a stale socket file (nobody listening) is replaced."""
    with pytest.raises(ControlError, match="already listening"):
        ControlServer(server.path, echo_handler).start()
    assert ControlClient(server.path).call("status")["ok"] is True
    stale = server.path.with_name("stale.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))
    assert stale.exists()
    srv2 = ControlServer(stale, echo_handler)
    srv2.start()
    try:
        assert ControlClient(stale).call("x")["ok"] is True
    finally:
        srv2.stop()


def test_regular_file_in_the_way_is_not_deleted(sock_dir: Path) -> None:
    """A non-socket file at the socket path is left alone and start fails."""
    path = sock_dir / "file"
    path.write_text("important")
    with pytest.raises(ControlError, match="not a socket"):
        ControlServer(path, echo_handler).start()
    assert path.read_text() == "important"


def test_client_unreachable_messages(sock_dir: Path) -> None:
    """No socket file and a stale socket both give 'daemon not reachable at <path>'."""
    missing = sock_dir / "missing.sock"
    with pytest.raises(ControlError, match=f"daemon not reachable at {missing}"):
        ControlClient(missing).call("status")
    stale = sock_dir / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))
    with pytest.raises(ControlError, match="daemon not reachable"):
        ControlClient(stale).call("status")


def test_client_timeout_when_daemon_hangs(sock_dir: Path) -> None:
    """A handler that never answers in time yields a timeout ControlError, not a hang."""
    release = threading.Event()

    def slow(_: dict[str, Any]) -> dict[str, Any]:
        release.wait(10)
        return {"ok": True}

    srv = ControlServer(sock_dir / "slow.sock", slow)
    srv.start()
    try:
        with pytest.raises(ControlError, match=r"did not answer within 0\.3 s"):
            ControlClient(srv.path, timeout=0.3).call("status")
    finally:
        release.set()
        srv.stop()


def test_permission_denied_names_group(server: ControlServer) -> None:
    """A user outside the socket's group gets the clear permission message (client run as nobody)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    code = (
        "import sys; from pathlib import Path; from supervisor.adapters.control.client import ControlClient;"
        "from supervisor.core.errors import ControlError\n"
        f"try:\n    ControlClient(Path({str(server.path)!r})).call('status')\n"
        "except ControlError as e:\n    print(e)"
    )
    proc = python_as_nobody(code)
    assert proc.returncode == 0, proc.stderr
    assert f"permission denied on {server.path}: your user is not in the socket's group root" in proc.stdout
    assert "usermod -aG root nobody" in proc.stdout


def test_reset_names_its_caller_from_the_socket(sock_dir: Path, tmp_path: Path) -> None:
    """The control API's reset carries the caller's uid (SO_PEERCRED, not the request) and user name;
    as root, a second caller runs as nobody."""
    inbox = Inbox()
    api = ControlApi(lambda: ["m1"], lambda: {"profiles": []}, Store(tmp_path), inbox)
    srv = ControlServer(sock_dir / "api.sock", api.handle, mode=0o666)
    srv.start()
    seen: list[object] = []

    def loop() -> None:  # the daemon loop's part: answer each command
        for _ in range(2):
            env = inbox.get(20)
            if env is None or env.reply is None:
                return
            seen.append(env.event)
            env.reply.set(True, "breaker reset: starting")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        reply = ControlClient(srv.path).call("reset", name="m1", uid=0, user="forged")
        assert reply["data"] == {"message": "breaker reset: starting"}
        me = os.getuid()
        assert seen == [ResetRequested(uid=me, user=pwd.getpwuid(me).pw_name)]
        if os.geteuid() == 0:
            code = (
                "from pathlib import Path; from supervisor.adapters.control.client import ControlClient\n"
                f"print(ControlClient(Path({str(srv.path)!r})).call('reset', name='m1')['ok'])"
            )
            proc = python_as_nobody(code)
            assert proc.stdout.strip() == "True", proc.stderr
            nobody = pwd.getpwnam("nobody").pw_uid
            assert seen[1] == ResetRequested(uid=nobody, user="nobody")
            assert ResetRequested(uid=nobody, user="nobody").who() == f"nobody (uid {nobody})"
    finally:
        srv.stop()
        inbox.wake()
        thread.join(10)

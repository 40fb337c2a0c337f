"""The control socket's client side (``supervisorctl``): one JSON-line request per connection.

The protocol (see :mod:`supervisor.adapters.control.server`, the server): request ``{"cmd": str, "args":
{...}}``,
response ``{"ok": bool, "data": ..., "error": str | None}``, one JSON object per line. This module imports
only what a call needs, so ``supervisorctl`` starts fast.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from supervisor.core.errors import ControlError

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from typing import Any

#: An answer larger than this is refused (``events`` and ``history`` are the largest: bounded lists).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


def encode(obj: dict[str, Any]) -> bytes:
    """One protocol line."""
    return (json.dumps(obj, default=str, ensure_ascii=False) + "\n").encode("utf-8")


#: Pause between connects while the daemon's listen backlog is full (EAGAIN).
CONNECT_RETRY_S = 0.05


class ControlClient:
    """One-call-per-connection client used by ``supervisorctl``."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.timeout = timeout

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Send one request and return the response dict (``ok`` may be False); ControlError if no answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(self.timeout)
            try:
                self._connect(sock)
            except PermissionError as exc:
                raise ControlError(self._permission_message()) from exc
            except OSError as exc:
                raise ControlError(f"daemon not reachable at {self.path}: {exc.strerror or exc}") from exc
            try:
                sock.sendall(encode({"cmd": cmd, "args": args}))
                buf = b""
                while b"\n" not in buf:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ControlError(f"daemon at {self.path} closed the connection without answering")
                    buf += chunk
                    if len(buf) > MAX_RESPONSE_BYTES:
                        raise ControlError(f"daemon at {self.path} sent an oversized answer")
            except TimeoutError as exc:
                raise ControlError(f"daemon at {self.path} did not answer within {self.timeout:g} s") from exc
            except OSError as exc:
                raise ControlError(f"daemon not reachable at {self.path}: {exc.strerror or exc}") from exc
        try:
            response = json.loads(buf.split(b"\n", 1)[0].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ControlError(f"daemon at {self.path} sent a malformed answer: {exc}") from exc
        if not isinstance(response, dict) or "ok" not in response:
            raise ControlError(f"daemon at {self.path} sent an answer without 'ok'")
        return response

    def _connect(self, sock: socket.socket) -> None:
        """Connect within the timeout. A socket with a timeout does not wait for room in a full listen
        backlog: it fails with EAGAIN at once, so that is tried again (every 50 ms, up to the timeout)."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                sock.connect(str(self.path))
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(CONNECT_RETRY_S)

    def _permission_message(self) -> str:
        import grp
        import pwd

        try:
            user = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            user = str(os.geteuid())
        try:
            gid = os.stat(self.path).st_gid
        except OSError:
            return (
                f"permission denied on {self.path}: your user ({user}) cannot reach the socket; "
                f"check the permissions of {self.path.parent}"
            )
        try:
            group = grp.getgrgid(gid).gr_name
        except KeyError:
            group = str(gid)
        return (
            f"permission denied on {self.path}: your user is not in the socket's group {group}; "
            f"ask an admin to run 'usermod -aG {group} {user}' and log in again, or use sudo"
        )

"""The control socket: JSON lines over a Unix stream socket between ``supervisorctl`` and the daemon.

Request ``{"cmd": str, "args": {...}}`` -> response ``{"ok": bool, "data": ..., "error": str | None}``,
one JSON object per line, several requests per connection allowed. The server only *posts* work to
the daemon through ``handler`` (which must not block for long); it never changes state itself.
The handler receives the request plus ``"peer": {"pid", "uid", "gid"}`` (SO_PEERCRED) for auditing.

The client (``supervisorctl``'s side) is :mod:`supervisor.adapters.control.client`, kept apart so the CLI
imports no server machinery.

Security: the socket is created under a umask that makes it never more permissive than ``mode``
(default 0660), then chowned to ``group``; who may talk to the daemon is who is in that group.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import selectors
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from supervisor.adapters.control.client import encode as _encode
from supervisor.adapters.threads import Supervised, checkpoint, supervised
from supervisor.config.source import nesting_exceeds
from supervisor.core.errors import ControlError
from supervisor.core.spec.secrets import mask_text_shapes

Handler = Callable[[dict[str, Any]], dict[str, Any]]
MAX_REQUEST_BYTES = 64 * 1024
MAX_CONNECTIONS = 16
#: Connections one non-root user may hold at once; root always finds a free slot (ROOT_RESERVED of them).
MAX_PER_USER = 4
ROOT_RESERVED = 4
#: A request must arrive whole within this (a client trickling bytes cannot hold a slot).
REQUEST_DEADLINE_S = 5.0
#: Nesting deeper than any request needs is refused before the handler sees it.
MAX_JSON_DEPTH = 16
_umask_lock = threading.Lock()


def _log() -> Any:
    """The module logger, imported on first use: the CLI (client side) must start fast (< 300 ms)."""
    import structlog

    return structlog.get_logger(__name__)


def _error(message: str) -> dict[str, Any]:
    return {"ok": False, "data": None, "error": message}


class ControlServer:
    """Accepts connections on one thread; each connection is served on its own short-lived thread."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        mode: int = 0o660,
        group: str | None = None,
        *,
        read_timeout_s: float = 5.0,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        redact: Callable[[str], str] = mask_text_shapes,
    ) -> None:
        self.path = Path(path)
        self._redact = redact  # the daemon's SecretBook.text: an exception's text may quote a secret
        self._handler = handler
        self._mode = mode
        self._group = group
        self._read_timeout_s = read_timeout_s
        self._max_request_bytes = max_request_bytes
        self._sock: socket.socket | None = None
        self._inode: int | None = None
        self._thread: Supervised | None = None
        self._stop = threading.Event()
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._slots_lock = threading.Lock()
        self._open: dict[int, int] = {}  # uid -> connections it holds

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Bind and start accepting; ControlError if another daemon answers or the socket cannot be made."""
        gid = self._resolve_group()
        self._clear_stale()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with _umask_lock:
                old = os.umask(0o777 & ~self._mode)
                try:
                    sock.bind(str(self.path))
                finally:
                    os.umask(old)
            os.chmod(self.path, self._mode)
            if gid is not None:
                os.chown(self.path, -1, gid)
            # a deep backlog: connections waiting there cost the kernel a little memory and no thread; the
            # slots (per user, root's reserve) decide who is served once accepted. A shallow one let a
            # crowd of reconnecting clients fill it, and root's own connect failed with EAGAIN.
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot create control socket {self.path}: {exc.strerror or exc}") from exc
        self._inode = os.stat(self.path).st_ino
        self._sock = sock
        self._wake = socket.socketpair()
        self._stop.clear()
        self._thread = supervised("control-accept", self._accept_loop, self._stop)  # a crash: restarted
        _log().info("control.listening", path=str(self.path), mode=oct(self._mode), group=self._group)

    def stop(self) -> None:
        """Stop accepting and remove our socket file (not one another process created meanwhile)."""
        self._stop.set()
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._wake is not None:
            for end in self._wake:
                end.close()
            self._wake = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == self._inode:
                    self.path.unlink()
        self._inode = None

    def _resolve_group(self) -> int | None:
        if self._group is None:
            return None
        try:
            return grp.getgrnam(self._group).gr_gid
        except KeyError:
            raise ControlError(
                f"control socket group {self._group!r} does not exist "
                f"(create it: groupadd --system {self._group})"
            ) from None

    def _clear_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ControlError(f"{self.path} exists and is not a socket; refusing to replace it")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2.0)
            try:
                probe.connect(str(self.path))
            except (ConnectionRefusedError, FileNotFoundError):
                pass  # stale: nobody listens
            except OSError as exc:
                raise ControlError(
                    f"cannot check existing socket {self.path}: {exc.strerror or exc}"
                ) from exc
            else:
                raise ControlError(f"another daemon is already listening on {self.path}")
        self.path.unlink(missing_ok=True)
        _log().info("control.stale_socket_removed", path=str(self.path))

    # ---- serving -----------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        sock, wake = self._sock, self._wake
        assert sock is not None
        assert wake is not None
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_READ)
            sel.register(wake[0], selectors.EVENT_READ)
            while not self._stop.is_set():
                checkpoint("control-accept")
                for key, _ in sel.select():
                    if key.fileobj is wake[0] or self._stop.is_set():
                        return
                    try:
                        conn, _addr = sock.accept()
                    except OSError:
                        continue
                    try:
                        peer = _peer(conn)
                    except OSError:
                        conn.close()
                        continue
                    refusal = self._take_slot(peer["uid"])
                    if refusal is not None:
                        with contextlib.suppress(OSError):
                            conn.settimeout(0.5)
                            conn.sendall(_encode(_error(refusal)))
                        conn.close()
                        continue
                    threading.Thread(
                        target=self._serve, args=(conn, peer), name="control-conn", daemon=True
                    ).start()

    def _take_slot(self, uid: int) -> str | None:
        """Count a new connection of ``uid``; the refusal's text when it may not have one."""
        with self._slots_lock:
            total = sum(self._open.values())
            mine = self._open.get(uid, 0)
            if uid == 0:
                if total >= MAX_CONNECTIONS + ROOT_RESERVED:
                    return "daemon busy: too many control connections"
            elif total >= MAX_CONNECTIONS:
                return "daemon busy: too many control connections"
            elif mine >= MAX_PER_USER:
                return f"daemon busy: uid {uid} already holds {mine} control connections"
            self._open[uid] = mine + 1
            return None

    def _give_slot(self, uid: int) -> None:
        with self._slots_lock:
            left = self._open.get(uid, 1) - 1
            if left > 0:
                self._open[uid] = left
            else:
                self._open.pop(uid, None)

    def _serve(self, conn: socket.socket, peer: dict[str, int]) -> None:
        try:
            buf = b""
            for _ in range(100):  # bounded number of requests per connection
                deadline = time.monotonic() + REQUEST_DEADLINE_S
                while b"\n" not in buf:
                    if len(buf) > self._max_request_bytes:
                        conn.sendall(_encode(_error(f"request larger than {self._max_request_bytes} bytes")))
                        return
                    left = min(self._read_timeout_s, deadline - time.monotonic())
                    if left <= 0:
                        return  # the whole request did not arrive in time: the slot goes back
                    conn.settimeout(left)
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                line, buf = buf.split(b"\n", 1)
                if len(line) > self._max_request_bytes:
                    conn.sendall(_encode(_error(f"request larger than {self._max_request_bytes} bytes")))
                    return
                if line.strip():
                    conn.sendall(self._respond(line, peer))
        except (TimeoutError, OSError):
            return  # a slow or vanished client only costs its own thread
        finally:
            conn.close()
            self._give_slot(peer["uid"])

    def _respond(self, line: bytes, peer: dict[str, int]) -> bytes:
        try:
            request = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            return _encode(_error(f"malformed request: {exc}"))
        except RecursionError:
            return _encode(_error(f"malformed request: nested more than {MAX_JSON_DEPTH} levels"))
        if nesting_exceeds(request, MAX_JSON_DEPTH):
            return _encode(_error(f"malformed request: nested more than {MAX_JSON_DEPTH} levels"))
        if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
            return _encode(_error('malformed request: expected {"cmd": str, "args": {...}}'))
        args = request.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return _encode(_error("malformed request: args must be an object"))
        try:
            response = self._handler({"cmd": request["cmd"], "args": args, "peer": peer})
            if not isinstance(response, dict) or "ok" not in response:
                raise TypeError(f"handler returned {type(response).__name__} without 'ok'")
            response = {"data": None, "error": None} | response
            return _encode(response)
        except Exception as exc:  # noqa: BLE001 - the server must survive any handler bug (logged)
            _log().exception("control.handler_failed", cmd=request["cmd"])
            what = f"internal error in {request['cmd'][:64]}: {type(exc).__name__}: {str(exc)[:2000]}"
            return _encode(_error(self._redact(what)))


def _peer(conn: socket.socket) -> dict[str, int]:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return {"pid": pid, "uid": uid, "gid": gid}

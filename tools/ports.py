"""TCP ports for the test and bench servers on 127.0.0.1 (one rule for tests/, bench/ and tools/).

The kernel may offer a port that was just closed again at once, to this process or to another (the suite
runs on several xdist workers). Two servers given the same port answer each other's readiness checks (a
Prometheus that could not bind while its Alertmanager answered ``/-/ready`` for it), so a port handed out
is claimed for the life of the process: a file named after it in :data:`CLAIMS`, created exclusively and
holding the owner's pid, removed when the process exits. A claim whose owner is gone is removed when met,
and that port is skipped this time (two processes cleaning up the same stale claim never both take it).
"""

from __future__ import annotations

import atexit
import os
import socket
from pathlib import Path

CLAIMS = Path(os.environ.get("VSUP_PORT_CLAIMS", "/tmp/vsup-port-claims"))
_MINE: set[int] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim(port: int) -> bool:
    """True when this process now owns ``port``'s claim."""
    CLAIMS.mkdir(mode=0o700, exist_ok=True)
    path = CLAIMS / str(port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            owner = int(path.read_text(encoding="ascii") or "0")
        except (OSError, ValueError):
            return False
        if owner and not _alive(owner):
            path.unlink(missing_ok=True)
        return False
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(str(os.getpid()))
    if not _MINE:
        atexit.register(_release)
    _MINE.add(port)
    return True


def _release() -> None:
    for port in _MINE:
        (CLAIMS / str(port)).unlink(missing_ok=True)
    _MINE.clear()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that no live process of this machine's test
    and bench runs was handed before."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _MINE and _claim(port):
            return port
    raise RuntimeError(f"no fresh TCP port on 127.0.0.1 after 64 tries (claims in {CLAIMS})")

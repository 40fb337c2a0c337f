"""TCP ports for the test and bench servers on 127.0.0.1 (one rule for tests/, bench/ and tools/)."""

from __future__ import annotations

import socket

#: Every port :func:`free_port` handed out in this process: the kernel may offer a closed port again at
#: once, and two servers of one test given the same port answer each other's readiness checks (a
#: Prometheus that could not bind while its Alertmanager answered ``/-/ready`` for it).
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process never handed out before."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no fresh TCP port on 127.0.0.1 after 64 tries")

"""Writing labelled lines to the real /dev/kmsg and reading Docker's ``die`` events (tests and bench).

The lines carry a unique token so a test finds its own among everyone's; an NV_ERR_NO_MEMORY line
names no process, so every daemon on the box whose policy is ``kill`` acts on it: test daemons default
to ``warn`` (tests/daemon_harness.py) and only the kill-path tests set ``kill``. A failed start's
diagnosis still ranks any such line in its window above vLLM's own log, so every test that writes one
is marked ``kmsg`` (one at a time, beside a parallel phase that cannot read the kernel log: docs/testing.md).
"""

from __future__ import annotations

import os
import time
from typing import Any

NOMEM = (
    "<3>NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal({token}) @ mem_desc.c:1353\n"
)


def kmsg_writable() -> bool:
    """Whether this process may write to /dev/kmsg (root)."""
    return os.access("/dev/kmsg", os.W_OK)


def write_kmsg(text: str) -> float:
    """Write one line to /dev/kmsg; the wall time just before the write."""
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        t = time.time()
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return t


def die_events(client: Any, container: str, since: float) -> list[dict[str, Any]]:
    """Docker's ``die`` events of ``container`` since ``since`` (epoch s), up to now (bounded call)."""
    until = time.time() + 1.0
    stream = client.events(
        since=int(since) - 1, until=until, filters={"container": container, "event": "die"}, decode=True
    )
    return [e for e in stream if e.get("timeNano", 0) / 1e9 >= since - 0.001]

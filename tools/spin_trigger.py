"""Arm the spin overlay's trigger (tools/overlays/spin/vsup_spin.py) inside a running container.

The overlay's engine step spins while the trigger file exists and the scheduler runs at least as many
requests as the file says; this writes that count with ``docker exec`` (the file lives in the container:
``/dev/shm`` is remade at every start, so any restart ends the spin) and hands back the undo.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any


def arm(container: Any, path: str, running: int = 1) -> Callable[[], None]:
    """Write ``running`` to ``path`` inside ``container`` (a docker-py Container); the undo removes it.
    Raises RuntimeError naming the container when the write fails."""
    done = container.exec_run(["sh", "-c", f"echo {int(running)} > {shlex.quote(path)}"])
    if done.exit_code != 0:
        raise RuntimeError(f"arming the spin trigger {path} in {container.name} failed: {done.output!r}")
    return lambda: container.exec_run(["rm", "-f", path])

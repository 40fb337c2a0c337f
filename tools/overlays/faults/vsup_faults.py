"""The engine faults of the test overlay (sitecustomize.py beside it), each on a trigger file in
``VSUP_FAULT_DIR`` (default ``/vsup-trigger``, mounted read-write):

- ``die``: the next engine-core step kills its own process (SIGKILL, as a native crash or the OOM killer
  ends it: no Python traceback). Armed before the start, the engine dies on its first request; armed after
  it served, on the next request.
- ``freeze``: while the file exists and the scheduler runs at least as many requests as it says (empty: 1),
  a step sleeps and never ends (:func:`freeze_while_triggered`: no CPU, no counter moves, ``/health`` 200);
  and from the moment the file appears the API server ignores SIGTERM (:func:`watch_sigterm`), as a
  server whose shutdown waits for the frozen engine: only a SIGKILL ends it.

Each fault prints one ``[vsup-overlay]`` line to stderr (the container log) when it takes effect."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

DIR = os.environ.get("VSUP_FAULT_DIR", "/vsup-trigger")
DIE = os.path.join(DIR, "die")
FREEZE = os.path.join(DIR, "freeze")
#: The line printed once SIGTERM is ignored (a test waits for it in the log before it freezes the engine).
SIGTERM_IGNORED = "[vsup-overlay] SIGTERM ignored from now on"


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _wanted(path: str, running: int) -> bool:
    """The trigger exists and asks for at most ``running`` scheduled requests (empty: 1)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return False
    try:
        return running >= int(text or "1")
    except ValueError:
        return True


def die_now() -> None:
    """Kill this process with SIGKILL: no traceback, no cleanup."""
    say(f"[vsup-overlay] engine core pid {os.getpid()} dies (SIGKILL)")
    os.kill(os.getpid(), signal.SIGKILL)


def freeze_while_triggered() -> None:
    """Sleep while the freeze trigger exists (a step that never ends, without CPU)."""
    say(f"[vsup-overlay] engine core pid {os.getpid()} frozen in a step")
    while os.path.exists(FREEZE):
        time.sleep(0.2)


def watch_sigterm(every_s: float = 0.2) -> None:
    """On a daemon thread: once the freeze trigger exists, set SIGTERM's disposition to SIG_IGN for the
    whole process (libc ``signal()``: Python's own handlers run on the main thread only, and vLLM's
    asyncio handler would start its shutdown)."""

    def body() -> None:
        while not os.path.exists(FREEZE):
            time.sleep(every_s)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(int(signal.SIGTERM), 1)  # SIG_IGN
        say(f"{SIGTERM_IGNORED} (pid {os.getpid()})")

    threading.Thread(target=body, name="vsup-sigterm", daemon=True).start()


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def stepping(self: Any, *args: Any, **kwargs: Any) -> Any:
        running = len(getattr(getattr(self, "scheduler", None), "running", ()) or ())
        if os.path.exists(DIE):
            die_now()
        if _wanted(FREEZE, running):
            freeze_while_triggered()
        return original(self, *args, **kwargs)

    stepping.__name__ = original.__name__
    stepping.__qualname__ = original.__qualname__
    return stepping


def patch(module: ModuleType) -> None:
    """Wrap ``EngineCore.step`` and ``EngineCore.step_with_batch_queue`` of vllm.v1.engine.core."""
    cls = module.EngineCore
    for name in ("step", "step_with_batch_queue"):
        original = getattr(cls, name, None)
        if original is not None:
            setattr(cls, name, _wrap(original))

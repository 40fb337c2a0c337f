"""The spinning step of the test overlay (sitecustomize.py beside it): while the trigger file exists and the
scheduler runs at least as many requests as the file says (empty: 1), the engine core's step burns a core in
:func:`spin_while_triggered` and never ends, so no counter moves; the API server answers ``/health`` 200 all
along. Removing the file lets the step go on. (Armed before the requests are sent, "2" makes the first step
after two requests were scheduled spin: /metrics then shows them running, as a hang mid-generation does.)"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

TRIGGER = os.environ.get("VSUP_SPIN_TRIGGER", "/vsup-trigger/spin")


def spin_while_triggered() -> int:
    """Burn the CPU while the trigger exists (checked every ~few ms); returns the loop count."""
    n = 0
    while os.path.exists(TRIGGER):
        for _ in range(100_000):
            n += 1
    return n


def armed(running: int) -> bool:
    """The trigger exists and asks for at most ``running`` scheduled requests."""
    try:
        with open(TRIGGER, encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return False
    try:
        return running >= int(text or "1")
    except ValueError:
        return True


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def stepping(self: Any, *args: Any, **kwargs: Any) -> Any:
        if armed(len(getattr(getattr(self, "scheduler", None), "running", ()) or ())):
            spin_while_triggered()
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

"""The process start of the test overlay (sitecustomize.py beside it): vLLM's CPU platform starts its engine
core and its worker with multiprocessing's ``spawn`` (vllm/platforms/cpu.py sets
``VLLM_WORKER_MULTIPROC_METHOD=spawn``), so each of the server's three processes imports torch and vLLM
again: about 7 s of a core each, 29 s of CPU for a load of the tiny model. ``fork`` starts them from their
parent's imports: 17 s (2026-12-05, docs/testing.md "The tests' real vLLM starts its children by fork").

The processes, their titles (``VLLM::EngineCore``, ``VLLM::Worker``), their logs and what each does are
vLLM's own; only how a child begins differs. A test-only patch, like the other overlays: the field's GPU
vLLM spawns (CUDA cannot fork), and its load is minutes, not seconds."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
from typing import Any

_original = multiprocessing.context.DefaultContext.get_context


def _get_context(self: Any, method: str | None = None) -> Any:
    return _original(self, "fork" if method == "spawn" else method)


def patch() -> None:
    """Every ``get_context("spawn")`` after this gives the ``fork`` context (in this process and, since
    they fork, in its children)."""
    multiprocessing.context.DefaultContext.get_context = _get_context  # type: ignore[method-assign]
    # the module-level function is a bound method taken when multiprocessing was imported
    multiprocessing.get_context = multiprocessing.context._default_context.get_context

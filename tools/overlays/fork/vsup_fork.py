"""The process start of the test overlay (sitecustomize.py beside it): vLLM's CPU platform starts its engine
core and its worker with multiprocessing's ``spawn`` (vllm/platforms/cpu.py sets
``VLLM_WORKER_MULTIPROC_METHOD=spawn``), so each of the server's three processes imports torch and vLLM
again: about 6 s of a core each, 28-29 s of CPU for a load of the tiny model. Here the API server starts
the engine core by ``fork`` (from its own imports), and the engine core still spawns the worker: 23 s.

Only the engine core is forked: a forked worker starts its OpenMP threads from its parent's runtime and
loses vLLM's thread binding (its affinity stayed on both cores, and 3 completions of 200 tokens took 2.7 s
and 5.4 s of CPU against 1.2 s and 2.2 s: a different engine). The engine core schedules and talks to the
worker; it computes nothing. The processes, their titles (``VLLM::EngineCore``, ``VLLM::Worker``), logs
and what each does are vLLM's own. A test-only patch, like the other overlays: the field's GPU vLLM
spawns (CUDA cannot fork), and its load is minutes, not seconds (docs/testing.md, 2026-12-05, third
session)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
from typing import Any

_original = multiprocessing.context.DefaultContext.get_context


#: The process that laid the patch: vLLM's API server (the container's PID 1). Only its child, the engine
#: core, is forked; the engine core still spawns its worker.
_API_SERVER = os.getpid()


def _get_context(self: Any, method: str | None = None) -> Any:
    if method == "spawn" and os.getpid() == _API_SERVER:
        method = "fork"
    return _original(self, method)


def patch() -> None:
    """Every ``get_context("spawn")`` after this gives the ``fork`` context (in this process and, since
    they fork, in its children)."""
    multiprocessing.context.DefaultContext.get_context = _get_context  # type: ignore[method-assign]
    # the module-level function is a bound method taken when multiprocessing was imported
    multiprocessing.get_context = multiprocessing.context._default_context.get_context

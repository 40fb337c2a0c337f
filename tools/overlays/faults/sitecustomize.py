"""Test overlay (issue 35): two engine faults laid over vLLM V1 the way the field patches vLLM, by a file on
the server's Python path (``PYTHONPATH=<this directory>``, mounted read-only). When
``vllm.v1.engine.core`` is imported, ``EngineCore.step`` and ``step_with_batch_queue`` are wrapped by
:func:`vsup_faults.patch` (a step dies or freezes on its trigger file); in the container's main process
(PID 1: the API server) a thread starts that ignores SIGTERM once the freeze trigger appears
(:func:`vsup_faults.watch_sigterm`). Any other import is left alone. The spinning step is
tools/overlays/spin."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TARGET = "vllm.v1.engine.core"


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        made: ModuleType | None = self.inner.create_module(spec)
        return made

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        import vsup_faults  # type: ignore[import-not-found]  # beside this file on the server's path

        vsup_faults.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
if os.getpid() == 1:  # the container's main process: vLLM's API server
    import vsup_faults

    vsup_faults.watch_sigterm()

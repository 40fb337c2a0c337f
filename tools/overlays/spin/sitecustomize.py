"""Test overlay (issue 35): patch vLLM V1's engine-core step the way the field patches vLLM, by laying a file
on the server's Python path (``PYTHONPATH=<this directory>``, mounted read-only). When
``vllm.v1.engine.core`` is imported, ``EngineCore.step`` and ``step_with_batch_queue`` are wrapped by
:func:`vsup_spin.patch`: a step spins on the CPU while the trigger file exists (a hung CUDA kernel with
CUDA's spin-wait seen from the host). Any other import is left alone."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
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
        import vsup_spin  # type: ignore[import-not-found]  # beside this file on the server's path

        vsup_spin.patch(module)


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

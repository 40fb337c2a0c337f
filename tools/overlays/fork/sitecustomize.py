"""Test overlay: the tiny real vLLM's engine core starts by ``fork`` instead of ``spawn`` (its worker is
still spawned: :mod:`vsup_fork`, beside this file), laid on the server's Python path first (``PYTHONPATH=<this
directory>[:<another overlay>]``, mounted read-only). Python imports one ``sitecustomize``: this one then
runs the next one on the path, so the fault and spin overlays (tools/overlays/faults, tools/overlays/spin)
still apply behind it."""

from __future__ import annotations

import os
import runpy
import sys

import vsup_fork  # type: ignore[import-not-found]  # beside this file on the server's path

vsup_fork.patch()

_here = os.path.dirname(os.path.abspath(__file__))
_after = False
for _entry in list(sys.path):
    if _after and os.path.isfile(os.path.join(_entry, "sitecustomize.py")):
        runpy.run_path(os.path.join(_entry, "sitecustomize.py"), run_name="sitecustomize_next")
        break
    if _entry and os.path.abspath(_entry) == _here:
        _after = True

"""The fork overlay (tools/overlays/fork) the tests' real vLLM runs with: ``spawn`` becomes ``fork``, and the
overlay laid behind it on the path (the fault and spin overlays) still runs. Plain processes, no vLLM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.realvllm import FORK_OVERLAY, forked

PROBE = (
    "import multiprocessing, os\n"
    "print(multiprocessing.get_context('spawn').get_start_method())\n"
    "print(multiprocessing.get_context().get_start_method())\n"
    "print(os.environ.get('VSUP_NEXT_RAN', '-'), flush=True)\n"
    # the forked child (vLLM's engine core) spawns its own children (the worker) as vLLM does
    "if os.fork() == 0:\n"
    "    print(multiprocessing.get_context('spawn').get_start_method(), flush=True)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
)


def _run(pythonpath: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout.split()


def test_spawn_becomes_fork_in_the_first_process_only_and_the_next_overlay_still_runs(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    next_overlay = "import os\nos.environ['VSUP_NEXT_RAN'] = 'yes'\n"
    (other / "sitecustomize.py").write_text(next_overlay, encoding="utf-8")
    assert _run(str(other)) == ["spawn", "fork", "yes", "spawn"]  # without the overlay: spawn is spawn
    # the API server forks; its child still spawns
    assert _run(f"{FORK_OVERLAY}:{other}") == ["fork", "fork", "yes", "spawn"]
    assert _run(str(FORK_OVERLAY)) == ["fork", "fork", "-", "spawn"]


def test_forked_puts_the_overlay_first_on_the_path() -> None:
    assert forked({"A": "1"}) == {"A": "1", "PYTHONPATH": "/vsup-fork"}
    assert forked({"PYTHONPATH": "/vsup-overlay"})["PYTHONPATH"] == "/vsup-fork:/vsup-overlay"

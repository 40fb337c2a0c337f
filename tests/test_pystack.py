"""Parsing ``py-spy dump`` of the real vLLM 0.32 engine core while its step spins (the test overlay
tools/overlays/spin; tests/fixtures/pyspy recorded by tools/progress_probe.py): the main thread's top frames
name the overlay's spinning function, file and line."""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.adapters.host.pystack import read_stack
from supervisor.core.probe_events import StackFrame
from supervisor.core.vllm.pystack import main_frames, summarize, threads

DUMP = (Path(__file__).parent / "fixtures" / "pyspy" / "v0.32-cpu-engine-core-spinning.txt").read_text()


def test_the_main_thread_of_the_engine_core_is_found_among_its_threads() -> None:
    names = [name for name, _ in threads(DUMP)]
    assert names[0] == "MainThread"
    assert "Thread-1 (process_input_sockets)" in names
    top = main_frames(DUMP)
    assert top[0] == StackFrame("spin_while_triggered", "vsup_spin.py", 21)
    assert top[2] == StackFrame("EngineCoreProc._process_engine_step", "vllm/v1/engine/core.py", 1606)


def test_three_samples_with_the_same_top_frame_say_so() -> None:
    idle = DUMP.replace("spin_while_triggered (vsup_spin.py:21)", "Queue.get (queue.py:171)")
    read = summarize("c1", [idle, DUMP, DUMP], pid=4547)
    assert read.same == 2
    assert read.samples == 3
    assert read.summary().startswith("spin_while_triggered (vsup_spin.py:21) <- _wrap.<locals>.stepping")
    frames = read.as_fields()["frames"]
    assert isinstance(frames, list)
    assert frames[0] == {"function": "spin_while_triggered", "file": "vsup_spin.py", "line": 21}


def test_a_dump_without_frames_says_why() -> None:
    read = summarize("c1", ["Error: Permission denied (os error 13)"], pid=None)
    assert read.frames == ()
    assert read.summary() == "no stack (py-spy printed no Python frame)"


def test_a_box_without_py_spy_gets_why_and_no_exception(tmp_path: Path) -> None:
    """The real adapter with a py-spy that is not there (and a container that has no cgroup): never raises."""
    read = read_stack("0" * 64, 2.0, exe=str(tmp_path / "py-spy"), root=tmp_path)
    assert read.frames == ()
    assert read.error == "the container's cgroup was not found (gone?)"
    cg = tmp_path / "cpu" / "docker" / ("0" * 64)
    cg.mkdir(parents=True)
    (cg / "cgroup.procs").write_text(f"{os.getpid()}\n")
    read = read_stack("0" * 64, 2.0, exe=str(tmp_path / "py-spy"), root=tmp_path)
    assert read.pid == os.getpid()
    assert (read.error or "").startswith("py-spy could not run"), read

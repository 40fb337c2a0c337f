"""docs/testing.md "kmsg": a test that writes a line to the real /dev/kmsg (``write_kmsg``, directly or
through a helper of its module) is marked ``kmsg`` (or ``exclusive``). Such a line names no container: every
test daemon on the box that reads the kernel log sees it, and a real failed start's diagnosis beside it took
another test's OOM-kill and Xid lines for its kernel cause (test_daemon_kernel_quiet.py was not marked;
found 2026-12-05). Read from the source, no test runs. scripts/test runs the ``kmsg`` tests beside the
parallel phase only when that phase cannot read the kernel log; the last test here checks it from inside."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _marked(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "mark.kmsg" in text or "mark.exclusive" in text


def _calls(node: ast.AST) -> set[str]:
    return {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}


def unmarked_kmsg_writers(tests: Path = TESTS) -> list[str]:
    """``module::test`` of every test function that writes to /dev/kmsg without the ``kmsg`` mark (or
    ``exclusive``)."""
    out = []
    for path in sorted(tests.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        writers = {"write_kmsg"}
        while True:  # the module's helpers that call a writer, however deep
            more = {f.name for f in funcs if _calls(f) & writers} - writers
            if not more:
                break
            writers |= more
        module_marked = any(
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)
            and _marked(n)
            for n in tree.body
        )
        for f in funcs:
            if not f.name.startswith("test_") or module_marked or any(_marked(d) for d in f.decorator_list):
                continue
            if _calls(f) & writers:
                out.append(f"{path.name}::{f.name}")
    return out


def test_every_test_writing_to_the_kernel_log_is_marked_kmsg() -> None:
    assert unmarked_kmsg_writers() == []


def test_the_rule_sees_a_write_through_a_helper(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "def _line():\n    write_kmsg('<3>x')\n\n"
        "def test_a():\n    _line()\n\n"
        "@pytest.mark.kmsg\ndef test_b():\n    write_kmsg('<3>y')\n\n"
        "def test_c():\n    pass\n",
        encoding="utf-8",
    )
    assert unmarked_kmsg_writers(tmp_path) == ["test_x.py::test_a"]


@pytest.mark.skipif(
    os.environ.get("VSUP_KMSG_APART") != "1",
    reason="scripts/test's parallel phase beside the kmsg tests only",
)
def test_beside_the_kmsg_tests_this_phase_cannot_read_the_kernel_log() -> None:
    """The parallel phase's processes (this worker, every daemon and bench it starts) are refused /dev/kmsg
    and dmesg, so the kmsg tests' lines beside them reach none of their daemons (scripts/test)."""
    with pytest.raises(PermissionError):
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
    dmesg = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30, check=False)
    assert dmesg.returncode != 0, "dmesg read the kernel log"

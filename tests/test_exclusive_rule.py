"""docs/testing.md "exclusive": a test that writes a line to the real /dev/kmsg (``write_kmsg``, directly or
through a helper of its module) is marked ``exclusive``. Such a line names no container: every test daemon
on the box reads it, and a real failed start's diagnosis beside it took another test's OOM-kill and Xid
lines for its kernel cause (test_daemon_kernel_quiet.py was not marked; found 2026-12-05). Read from the
source, no test runs."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _marked(node: ast.AST) -> bool:
    return "exclusive" in ast.unparse(node)


def _calls(node: ast.AST) -> set[str]:
    return {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}


def unmarked_kmsg_writers(tests: Path = TESTS) -> list[str]:
    """``module::test`` of every test function that writes to /dev/kmsg without the ``exclusive`` mark."""
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


def test_every_test_writing_to_the_kernel_log_is_exclusive() -> None:
    assert unmarked_kmsg_writers() == []


def test_the_rule_sees_a_write_through_a_helper(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "def _line():\n    write_kmsg('<3>x')\n\n"
        "def test_a():\n    _line()\n\n"
        "@pytest.mark.exclusive\ndef test_b():\n    write_kmsg('<3>y')\n\n"
        "def test_c():\n    pass\n",
        encoding="utf-8",
    )
    assert unmarked_kmsg_writers(tmp_path) == ["test_x.py::test_a"]

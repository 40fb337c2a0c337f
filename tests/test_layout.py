"""The house rules of the source tree: small modules, no import circles, dependencies point down,
no reference to documents outside the repository."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "supervisor"
MAX_LINES = 400
#: What each layer may import from the project (besides itself and the standard library).
ALLOWED = {
    "supervisor.core": ("supervisor.core",),
    "supervisor.config": ("supervisor.core", "supervisor.config"),
    "supervisor.adapters": ("supervisor.core", "supervisor.config", "supervisor.adapters"),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules imported at module level (lazy imports inside functions are not edges)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in modules:
                found.add(name)
    return found


def test_no_module_over_400_lines() -> None:
    """Every module of supervisor/ (the simulator aside) is under 400 lines: one concern each."""
    big = {
        str(p.relative_to(ROOT)): n
        for p in PKG.rglob("*.py")
        if "sim" not in p.parts and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert big == {}


def test_no_import_circles() -> None:
    """The module-level import graph of supervisor/ has no cycle."""
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    # a package imports its own submodules in __init__: that is not a circle through the package
    for m, deps in graph.items():
        graph[m] = {d for d in deps if not (m.startswith(d + ".") and modules[d].name == "__init__.py")}
    seen: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if seen.get(d) == 1:
                cycles.append([*stack[stack.index(d) :], d])
            elif d not in seen:
                visit(d)
        stack.pop()
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m)
    assert cycles == []


def test_dependencies_point_down() -> None:
    """core imports only core; config only core/config; adapters never the daemon, CLI or tools."""
    modules = _modules()
    wrong = []
    for m, path in modules.items():
        for layer, allowed in ALLOWED.items():
            if m == layer or m.startswith(layer + "."):
                for d in _imports(path, modules):
                    if d != "supervisor" and not d.startswith(allowed):  # the root: __version__
                        wrong.append(f"{m} -> {d}")
    assert wrong == []


def test_no_reference_to_documents_outside_the_repository() -> None:
    """A newcomer only gets the repository: no file names the reference documents kept elsewhere."""
    pattern = r"DESIGN\.md|DOMAIN\.md|VLLM_FACTS|REAL_VLLM\.md|REAL_PARTS\.md|/work/shared|\.\./shared/"
    out = subprocess.run(
        ["git", "grep", "-nE", pattern, "--", ".", ":!tests/test_layout.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    assert re.sub(r"\s+", "", out.stdout) == ""

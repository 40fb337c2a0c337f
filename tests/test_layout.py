"""The house rules of the source tree: one folder per concern, modules of one concern, no import circles,
dependencies point down, no reference to documents outside the repository.

Every import counts, wherever it stands: at module level, inside a function (a lazy import, used for a fast
CLI start) or under ``TYPE_CHECKING``. A lazy import that breaks a rule is as wrong as any other: it only
hides the arrow from a reader.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "supervisor"
MAX_LINES = 400
#: supervisor/ itself holds only the package face and the entry points (``python -m supervisor``, the demo).
MAX_LOOSE_TOP = 4
#: core/'s loose modules are the contract (states, vocab, events by source, actions, errors, clock, the
#: profile state and its record codec, the load-time values it shows...); the rest: wings. The contract
#: grows only by modules every wing may need; logic of one concern goes to that concern's wing.
MAX_LOOSE_CORE = 18
#: adapters/ is one folder per seam (docker, host, kernel_log, vllm, alerts, metrics, control, store) and
#: daemon/ is three rooms (the loop and its plumbing loose, executor/, sources/): at most 10 loose
#: modules each.
MAX_LOOSE_ROOM = 10

#: Who may import whom, by room (the first matching prefix decides; every room may import itself).
#: The order is the house from the ground floor up: core, config, adapters, then the three programs.
RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("supervisor.sim", (), "the simulator runs alone in its image: it imports nothing of the supervisor"),
    ("supervisor.core", ("supervisor.core",), "core is pure: it imports only core"),
    ("supervisor.config", ("supervisor.core",), "config parses into core's values: it imports only core"),
    ("supervisor.adapters", ("supervisor.core", "supervisor.config"), "adapters import only core and config"),
    (
        "supervisor.offline",
        ("supervisor.core", "supervisor.config", "supervisor.adapters"),
        "the offline tools need no daemon and no client: they never import daemon/ or cli/",
    ),
    (
        "supervisor.daemon",
        ("supervisor.core", "supervisor.config", "supervisor.adapters"),
        "the daemon never imports cli/ or offline/ (what both need lives in core/)",
    ),
    (
        "supervisor.cli",
        ("supervisor.core", "supervisor.config", "supervisor.adapters", "supervisor.offline"),
        "the client talks to the daemon over the socket: it never imports daemon/",
    ),
)
#: Inside core: the contract (core's loose modules) is the ground floor, the wings stand on it.
CONTRACT_RULE = "core's contract (its loose modules) imports only the contract, never a wing"
#: No wing imports the state machine: it is the top of core.
MACHINE = "supervisor.core.machine"


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
    """Project modules imported anywhere in the file (module level, in functions, under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in modules:
                found.add(name)
    return found


def _graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    # a package's face hands on its own submodules: that is not a circle through the package
    for m, deps in graph.items():
        graph[m] = {d for d in deps if not (m.startswith(d + ".") and modules[d].name == "__init__.py")}
    return modules, graph


def _in(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def _is_contract(module: str, modules: dict[str, Path]) -> bool:
    parts = module.split(".")
    return len(parts) == 3 and parts[1] == "core" and modules[module].name != "__init__.py"


def broken_rules(modules: dict[str, Path], graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks a rule, as "a -> b: the rule"."""
    wrong = []
    for m in sorted(graph):
        rule = next((r for r in RULES if _in(m, r[0])), None)
        for d in sorted(graph[m]):
            if d == "supervisor":  # the package face: __version__
                continue
            if rule is not None:
                room, allowed, why = rule
                if not _in(d, room) and not any(_in(d, a) for a in allowed):
                    wrong.append(f"{m} -> {d}: {why}")
                    continue
            if _is_contract(m, modules) and _in(d, "supervisor.core") and not _is_contract(d, modules):
                if d != "supervisor.core":
                    wrong.append(f"{m} -> {d}: {CONTRACT_RULE}")
            elif _in(d, MACHINE) and _in(m, "supervisor.core") and not _in(m, MACHINE):
                wrong.append(f"{m} -> {d}: no wing of core imports the state machine (it is core's top)")
    return wrong


def test_no_module_over_400_lines() -> None:
    """Every module of supervisor/ (the simulator aside) is under 400 lines: one concern each."""
    big = {
        str(p.relative_to(ROOT)): n
        for p in PKG.rglob("*.py")
        if "sim" not in p.parts and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert big == {}


def test_one_folder_per_concern() -> None:
    """supervisor/ holds entry points only, core/ its contract only; everything else lives in a folder."""
    top = sorted(p.name for p in PKG.glob("*.py"))
    core = sorted(p.name for p in (PKG / "core").glob("*.py"))
    assert len(top) <= MAX_LOOSE_TOP, top
    assert len(core) <= MAX_LOOSE_CORE, core
    for room in ("adapters", "daemon"):
        loose = sorted(p.name for p in (PKG / room).glob("*.py"))
        assert len(loose) <= MAX_LOOSE_ROOM, (room, loose)


def test_no_import_circles() -> None:
    """The import graph of supervisor/, lazy imports included, has no cycle."""
    _, graph = _graph()
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
    """Every import, lazy ones too, follows the rules of RULES and of core's contract."""
    modules, graph = _graph()
    assert broken_rules(modules, graph) == []


def test_a_lazy_import_that_breaks_a_rule_is_caught(tmp_path: Path) -> None:
    """The rules read imports inside functions: a lazy daemon -> cli import is named with its rule."""
    src = tmp_path / "m.py"
    src.write_text("def f() -> None:\n    from supervisor.cli.render import render_status\n", "utf-8")
    modules = _modules()
    modules["supervisor.daemon.lazy_probe"] = src
    graph = {"supervisor.daemon.lazy_probe": _imports(src, modules)}
    assert broken_rules(modules, graph) == [
        "supervisor.daemon.lazy_probe -> supervisor.cli.render: "
        "the daemon never imports cli/ or offline/ (what both need lives in core/)"
    ]


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

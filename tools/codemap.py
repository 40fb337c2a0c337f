"""Keep docs/ARCHITECTURE.md's code map in step with supervisor/: ``python -m tools.codemap``.

Every module keeps the line it has; a new module gets one from its docstring's first paragraph, a module
that is gone loses its line, and a folder's heading comes and goes with its modules.
``tests/test_readme.py`` fails while the map and the tree differ.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
HEAD = "## Code map"


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "(no docstring)"
    return " ".join(doc.split("\n\n", 1)[0].split())


def _modules() -> dict[str, list[str]]:
    """Folder -> its non-empty modules, sorted."""
    out: dict[str, list[str]] = {}
    for p in sorted((ROOT / "supervisor").rglob("*.py")):
        if p.read_text(encoding="utf-8").strip():
            out.setdefault(str(p.parent.relative_to(ROOT)), []).append(p.name)
    return out


def render(text: str) -> str:
    """``text`` (the whole document) with its code map brought in step with the tree."""
    before, after = text.split(HEAD, 1)
    intro, *_ = re.split(r"^### ", after, maxsplit=1, flags=re.M)
    kept: dict[tuple[str, str], str] = {}
    folder = ""
    for line in after.splitlines():
        if m := re.match(r"^### `([\w/]+)/`$", line):
            folder = m.group(1)
        elif m := re.match(r"^- `([\w.]+\.py)`:", line):
            kept[(folder, m.group(1))] = line
    # the blank lines around the heading are made here, never kept: a second run changes nothing
    parts = [before.rstrip("\n") + "\n", HEAD, "", intro.strip("\n"), ""]
    for folder, names in sorted(_modules().items()):
        parts += ["", f"### `{folder}/`", ""]
        for name in names:
            parts.append(kept.get((folder, name)) or f"- `{name}`: {_summary(ROOT / folder / name)}")
    return "\n".join(parts).rstrip("\n") + "\n"


def main() -> int:
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"{DOC.relative_to(ROOT)}: code map updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())

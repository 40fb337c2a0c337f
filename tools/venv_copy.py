"""Rewrite the paths inside a copied venv (scripts/setup's project-venv cache; docs/infra.md step 3).

A venv names its own absolute path in its scripts' interpreter lines, its ``activate*`` scripts and
``pyvenv.cfg``; an editable install names the checkout it was made from in its finder, ``.pth`` and
``direct_url.json``. scripts/setup makes the project venv once under the cache and copies it into each
checkout, so both paths must be rewritten in the copy.

The rewrite is **one pass** over each file: every occurrence of either old path (the venv first, as it may lie
inside the old checkout) is replaced, and the text put in is never looked at again. Two passes broke CI on
2026-12-04: the checkout was ``/check/work/main``, the cache made from ``/work/main``, so the second pass
found ``/work/main/`` inside the first pass's ``/check/work/main/.venv/bin/python`` and every script's
interpreter line became ``/check/check/work/main/...`` ("cannot execute: required file not found" for
pytest and mypy).

After the rewrite every script's interpreter line must name a file that exists, else exit 1 naming the first
that does not (scripts/setup then makes the venv in place instead).

Standard library only: scripts/setup runs it with the system ``python3`` before any venv exists.
``python3 -m tools.venv_copy relocate VENV OLD_VENV OLD_ROOT NEW_ROOT`` rewrites and checks;
``python3 -m tools.venv_copy check VENV`` only checks (scripts/setup's second run: an existing ``.venv`` whose
``python -m pip`` works may still hold broken interpreter lines, as every checkout set up on 2026-12-04 did).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# What may follow the old checkout's path for it to be that path (and not e.g. /work/main2).
_ROOT_ENDS = "/'\"\n"


def rewrite(text: str, old_venv: str, new_venv: str, old_root: str, new_root: str) -> str:
    """``text`` with ``old_venv`` -> ``new_venv`` and ``old_root`` (followed by one of ``_ROOT_ENDS``) ->
    ``new_root``, in one pass (replaced text is not searched again)."""
    pattern = re.compile(f"({re.escape(old_venv)})|({re.escape(old_root)})(?=[{re.escape(_ROOT_ENDS)}])")

    def put(m: re.Match[str]) -> str:
        return new_venv if m.group(1) is not None else new_root

    return pattern.sub(put, text)


def _files(venv: Path, site: Path) -> list[Path]:
    """The files of the copy that may name the old paths (``site``: its site-packages)."""
    return [
        *venv.glob("bin/*"),
        venv / "pyvenv.cfg",
        *site.glob("__editable__*"),
        *site.glob("*.pth"),
        *site.glob("vllm_supervisor-*.dist-info/*"),
    ]


def bad_interpreters(venv: Path) -> list[str]:
    """The scripts in ``venv/bin`` whose ``#!`` line names an interpreter that does not exist."""
    bad = []
    for f in sorted(venv.glob("bin/*")):
        if f.is_symlink() or not f.is_file():
            continue
        with f.open("rb") as fh:
            first = fh.readline(4096)
        if not first.startswith(b"#!/"):
            continue
        interpreter = first[2:].split()[0].decode("utf-8", "replace")
        if not Path(interpreter).exists():
            bad.append(f"{f.name}: {interpreter}")
    return bad


def relocate(venv: Path, old_venv: str, old_root: str, new_root: str) -> list[str]:
    """Rewrite the copy at ``venv``; return what :func:`bad_interpreters` finds afterwards."""
    site = next(venv.glob("lib/python3*/site-packages"))
    for f in _files(venv, site):
        if f.is_symlink() or not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary (compiled extensions, interpreter links' targets)
            continue
        new = rewrite(text, old_venv, str(venv), old_root, new_root)
        if new != text:
            f.write_text(new, encoding="utf-8")
    for pyc in site.glob("__pycache__/__editable__*"):
        pyc.unlink()
    return bad_interpreters(venv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["relocate"] and len(argv) == 5:
        venv, old_venv, old_root, new_root = argv[1:]
        bad = relocate(Path(venv), old_venv, old_root, new_root)
    elif argv[:1] == ["check"] and len(argv) == 2:
        bad = bad_interpreters(Path(argv[1]))
    else:
        print(
            "usage: python3 -m tools.venv_copy relocate VENV OLD_VENV OLD_ROOT NEW_ROOT | check VENV",
            file=sys.stderr,
        )
        return 2
    if bad:
        print(f"venv_copy: {len(bad)} script(s) name a missing interpreter, first {bad[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

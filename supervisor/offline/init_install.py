"""Whether the daemon ``init`` would install runs from paths only root can change.

The unit runs the daemon as root. Its interpreter, its venv and its package (a checkout on PYTHONPATH
too) must therefore be writable by root alone, and so must every directory above them: a user who can
write ``/home/u/venv/bin`` (or rename ``/home/u``) can replace what root runs. :func:`unsafe` judges
(pure) a list of (path, owner uid, mode); :func:`install_paths` and :func:`stat_chain` gather them.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import supervisor


@dataclass(frozen=True)
class PathFacts:
    """One path's owner and mode (``lstat``: a symlink is judged by its directory, then its target)."""

    path: str
    uid: int
    mode: int


def unsafe(facts: Iterable[PathFacts]) -> list[str]:
    """Why each path a non-root user could change is unsafe (empty: all are root's alone)."""
    out = []
    for f in facts:
        if stat.S_ISLNK(f.mode):
            continue  # its target and the directory holding it are judged on their own
        if f.uid != 0:
            out.append(f"{f.path} is owned by uid {f.uid}, not root")
        elif f.mode & 0o022:
            who = "group" if f.mode & 0o020 and not f.mode & 0o002 else "every user"
            out.append(f"{f.path} is writable by {who} (mode {stat.S_IMODE(f.mode):04o})")
    return out


def stat_chain(paths: Sequence[Path]) -> list[PathFacts]:
    """Each path and every directory above it, once, unresolved and resolved (symlinks both ways)."""
    seen: dict[str, PathFacts] = {}
    for p in paths:
        for q in (p, p.resolve()):
            for node in (q, *q.parents):
                key = str(node)
                if key in seen:
                    continue
                try:
                    st = os.lstat(node)
                except OSError:
                    continue
                seen[key] = PathFacts(key, st.st_uid, st.st_mode)
    return list(seen.values())


def install_paths() -> list[Path]:
    """What root would run: the interpreter, the venv's scripts, the package's files and every directory
    on the import path (site-packages, a checkout on PYTHONPATH)."""
    pkg = Path(supervisor.__file__).parent
    bindir = Path(sys.executable).parent
    paths = [Path(sys.executable), bindir, Path(sys.prefix), pkg, *sorted(pkg.rglob("*.py"))]
    paths += [Path(p) for p in sys.path if p and Path(p).is_dir()]
    paths += [p for p in (bindir / "vllm-supervisor", bindir / "supervisorctl") if p.exists()]
    return paths


def install_problems() -> list[str]:
    """:func:`unsafe` of the running install."""
    return unsafe(stat_chain(install_paths()))

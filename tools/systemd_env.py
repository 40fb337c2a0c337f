"""The venv the daemon runs from inside the systemd-as-PID-1 container (tests/test_systemd_real.py).

A venv of Debian's ``/usr/bin/python3.11`` (the systemd image's own interpreter, so the container runs it
through a bind mount at the same absolute path; a venv of another host python fails there with 203/EXEC)
holding the project's runtime dependencies from ``pyproject.toml``. The project itself is not installed:
the unit's drop-in puts the checkout on ``PYTHONPATH``, so a code change needs no rebuild.

Cached under ``${VSUP_CACHE:-/var/cache/vllm-supervisor}/systemd-venv`` with a stamp of its recipe hash,
built beside its place and renamed (tools/realvllm.py's helpers). ``python -m tools.systemd_env`` prints it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from tools.realvllm import PYTHON, ROOT, _locked, build_atomically, cache_dir, is_current, remove_leftovers


def dependencies() -> list[str]:
    """The project's runtime requirements (``[project].dependencies``)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [str(d) for d in data["project"]["dependencies"]]


def venv_path() -> Path:
    return cache_dir() / "systemd-venv"


def recipe_hash() -> str:
    recipe = {"python": PYTHON, "packages": dependencies(), "version": 1}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _build(target: Path) -> None:
    if not Path(PYTHON).exists():
        raise RuntimeError(f"{PYTHON} is missing: install Debian's python3.11 (scripts/setup does)")
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(target)], check=True, timeout=300)
    pip = [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python")]
    subprocess.run([*pip, "install", "--quiet", *dependencies()], check=True, timeout=900)


def ensure_venv() -> Path:
    """The venv, built first when missing or stale. Safe to call from several processes at once."""
    final = venv_path()
    with _locked(cache_dir()):
        remove_leftovers(final)
        want = recipe_hash()
        if not is_current(final, want):
            build_atomically(final, want, _build)
    return final


if __name__ == "__main__":
    print(ensure_venv())

"""What the systemd-as-PID-1 containers run the daemon from: a checkout venv, or the wheel and its wheelhouse.

**The checkout venv** (tests/test_systemd_real.py):

A venv of Debian's ``/usr/bin/python3.11`` (the systemd image's own interpreter, so the container runs it
through a bind mount at the same absolute path; a venv of another host python fails there with 203/EXEC)
holding the project's runtime dependencies from ``pyproject.toml``. The project itself is not installed:
the unit's drop-in puts the checkout on ``PYTHONPATH``, so a code change needs no rebuild.

Cached under ``${VSUP_CACHE:-/var/cache/vllm-supervisor}/systemd-venv`` with a stamp of its recipe hash,
built beside its place and renamed (tools/realvllm.py's helpers). ``python -m tools.systemd_env`` prints it.

**The wheel as users install it** (tests/test_init_real.py, tests/test_wheel_install.py, docs/install.md):
:func:`build_wheel` builds the project's wheel with ``pip wheel --no-deps`` from a copy of ``pyproject.toml``,
``README.md`` and ``supervisor/`` (an in-tree build would leave ``build/`` and ``*.egg-info`` in the
checkout); :func:`ensure_wheelhouse` keeps, cached like the venv, a directory of the wheels of the runtime
dependencies (``pip download --only-binary :all:``), so a box with no package index can run
docs/install.md's ``pip install`` of the wheel with ``--no-index --find-links WHEELHOUSE``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
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


def wheelhouse_path() -> Path:
    return cache_dir() / "wheelhouse"


def _wheelhouse_hash() -> str:
    recipe = {"packages": dependencies(), "python": "3.11", "version": 1}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _download(target: Path) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "--python-version"]
    subprocess.run([*argv, "3.11", "-d", str(target), *dependencies()], check=True, timeout=900)


def ensure_wheelhouse() -> Path:
    """The wheels of the runtime dependencies, downloaded once per recipe (then offline)."""
    final = wheelhouse_path()
    with _locked(cache_dir()):
        remove_leftovers(final)
        want = _wheelhouse_hash()
        if not is_current(final, want):
            build_atomically(final, want, _download)
    return final


def build_wheel(dest: Path) -> Path:
    """The project's wheel, built from a copy of its sources under ``dest`` (which must not exist yet)."""
    src = dest / "vllm-supervisor"  # not "src": setuptools reads a directory of that name as a src-layout
    src.mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "supervisor", src / "supervisor", ignore=shutil.ignore_patterns("__pycache__"))
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(src), "-w", str(dest / "dist")]
    build = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if build.returncode != 0:
        raise RuntimeError(f"pip wheel failed: {build.stdout}{build.stderr}")
    (wheel,) = (dest / "dist").glob("vllm_supervisor-*.whl")
    return wheel


if __name__ == "__main__":
    print(ensure_venv())


def box_exec(
    box: str,
    argv: tuple[str, ...],
    *,
    stdin: str | None = None,
    timeout: float = 60,
    workdir: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``docker exec`` ARGV in the systemd box ``box`` (stdin when given, the box's ``workdir``), its output
    as text; never raises for the exit status (the callers decide what a failure is)."""
    cmd = ["docker", "exec", *(["-i"] if stdin is not None else []), *(["-w", workdir] if workdir else [])]
    cmd += [box, *argv]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)

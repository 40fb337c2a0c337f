"""Installing into a new venv fast: uv where pip has no sources of its own (a new machine), else pip.

uv fetches and unpacks packages in parallel, pip one at a time: the real-vLLM venv's ~150 packages took uv
37.6 s and pip 82.7 s on this box with no pip configuration (docs/real-parts.md "Which installer"). uv reads
none of pip's configuration, so where pip has any setting that changes what gets installed (a mirror,
constraints: this box's /etc/pip.conf), pip installs and that configuration holds. Anything going wrong with
uv falls back to pip in a venv made again.

Stdlib only: scripts/setup runs ``python3 -m tools.installer VENV ARGS...`` with a new machine's bare python3
for the project venv (ARGS: pip install arguments, e.g. ``-e .[dev]``); tools/realvllm.py calls
:func:`install` for the real-vLLM venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: The uv release used (fetched by the venv's own pip into a directory beside the venv, removed after).
UV = "uv==0.13.9"
#: pip settings (``pip config list`` keys) that do not change what gets installed: with only these, uv
#: installs (find-links passed on, pip's ``cert`` bundle made uv's); with any other, pip.
PIP_HARMLESS = frozenset(
    {
        "cert",
        "config-file",
        "default-timeout",
        "timeout",
        "retries",
        "disable-pip-version-check",
        "find-links",
        "progress-bar",
        "root-user-action",
        "no-cache-dir",
        "cache-dir",
        "quiet",
        "verbose",
        "no-color",
        "no-input",
    }
)


def pip_settings(python: str) -> dict[str, str]:
    """What ``pip config list`` of ``python`` shows (every file and PIP_* variable), as key -> value."""
    done = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True, timeout=120
    )
    settings: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.rsplit(".", 1)[-1]] = value.strip().strip("'\"")
    return settings


def find_links(settings: dict[str, str]) -> list[str]:
    """The find-links directories or URLs of pip's ``settings``."""
    return settings.get("find-links", "").split()


def uv_sources(settings: dict[str, str], extra: Sequence[str] = ()) -> list[str] | None:
    """uv's source arguments for a box whose pip has ``settings`` (plus ``extra``, e.g. an extra index), or
    None where pip must install (a setting not in PIP_HARMLESS)."""
    if set(settings) - PIP_HARMLESS:
        return None
    links = [arg for d in find_links(settings) for arg in ("--find-links", d)]
    return [*links, *extra, "--index-strategy", "unsafe-best-match"]


def _log(message: str) -> None:
    print(f"[installer] {message}", file=sys.stderr, flush=True)


def _uv(venv: Path, python: str, sources: list[str], args: Sequence[str], cert: str | None) -> None:
    tools, cache = venv.with_name(venv.name + ".uv"), venv.with_name(venv.name + ".uv-cache")
    try:
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--target", str(tools), UV], check=True, timeout=300
        )
        env = {**os.environ, "UV_CACHE_DIR": str(cache), "UV_NO_CONFIG": "1"}
        if cert:
            env["SSL_CERT_FILE"] = cert
        argv = [str(tools / "bin" / "uv"), "pip", "install", "--quiet", "--system-certs", "--python", python]
        subprocess.run([*argv, *sources, *args], check=True, timeout=1800, env=env)
    finally:
        shutil.rmtree(tools, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def install(
    venv: Path,
    base_python: str,
    args: Sequence[str],
    *,
    extra: Sequence[str] = (),
    pip_flags: Sequence[str] = (),
    settings: dict[str, str] | None = None,
    log: Callable[[str], None] = _log,
) -> str:
    """Install ``args`` (pip install arguments) into ``venv``, a venv made by ``base_python -m venv`` (with
    its own pip), plus ``extra`` source arguments for either installer; ``pip_flags`` only for pip. uv where
    :func:`uv_sources` allows it, else (or when uv fails: the venv made again) pip. Returns which one did."""
    python = str(venv / "bin" / "python")
    found = pip_settings(python) if settings is None else settings
    sources = uv_sources(found, extra)
    if sources is not None:
        try:
            _uv(venv, python, sources, args, found.get("cert"))
            return "uv"
        except (subprocess.SubprocessError, OSError) as exc:
            log(f"uv could not install into {venv} ({exc}); pip does")
            shutil.rmtree(venv, ignore_errors=True)
            venv.mkdir(mode=0o755, parents=True, exist_ok=True)
            subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", *pip_flags, *extra, *args], check=True, timeout=1800
    )
    return "pip"


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: python3 -m tools.installer VENV PIP_INSTALL_ARGS...", file=sys.stderr)
        return 2
    venv = Path(argv[1])
    if not (venv / "bin" / "python").exists():
        print(f"{venv} is not a venv (no bin/python): make it with python3 -m venv first", file=sys.stderr)
        return 2
    try:
        install(venv, sys.executable, argv[2:])
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"installing into {venv} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

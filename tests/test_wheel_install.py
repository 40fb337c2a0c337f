"""The package as users install it (issue 38, docs/install.md): the wheel built from the repository, installed
into a clean venv outside it, the commands run from another directory.

The wheel is built by pip (``pip wheel --no-deps``, setuptools from the package index scripts/setup uses)
from a copy of ``pyproject.toml``, ``README.md`` and ``supervisor/`` (tools/systemd_env.py
``build_wheel``; an in-tree build would leave ``build/`` and ``*.egg-info`` in the checkout).
tests/test_init_real.py installs the same wheel into a root-owned venv in systemd-in-a-container and
runs ``init`` from it. The new venv gets only the wheel (``--no-deps
--no-index``); its dependencies come from the project venv's site-packages through a ``.pth`` line (a
path line: the project venv's own ``.pth`` files, the editable install's finder among them, are not run,
so ``import supervisor`` can only find the installed copy; the test checks that it does). No
``PYTHONPATH``, a working directory outside the repository. Then: ``--help``, ``--version``,
``check-config`` on the shipped examples taken from the installed package, ``diagnose`` on a real vLLM
log, and the unit files ``init`` would write, read from the installed package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tools.systemd_env import build_wheel

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "vllm-logs" / "050-v0.32-cpu-shm-64m-insufficient-dev-shm.log"


class Installed:
    """The clean venv with the wheel installed, and a way to run its commands from ``cwd``."""

    def __init__(self, venv: Path, cwd: Path) -> None:
        self.venv = venv
        self.cwd = cwd

    def run(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return subprocess.run(
            [str(self.venv / "bin" / command), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.cwd,
            env=env,
            check=False,
        )

    def python(self, code: str) -> str:
        proc = self.run("python", "-c", code)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(base / "build")
    pip = [sys.executable, "-m", "pip"]
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "_vsup_test_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    cwd = base / "elsewhere"
    cwd.mkdir()
    return Installed(venv, cwd)


def test_the_installed_package_is_the_one_imported(installed: Installed) -> None:
    """``import supervisor`` in the new venv finds the wheel's copy, not the checkout."""
    path = Path(installed.python("import supervisor; print(supervisor.__file__)"))
    assert path.is_relative_to(installed.venv)
    assert not path.is_relative_to(ROOT)


def test_help_and_version_from_another_directory(installed: Installed) -> None:
    for command in ("supervisorctl", "vllm-supervisor"):
        helped = installed.run(command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert "usage:" in helped.stdout
        version = installed.run(command, "--version")
        assert version.returncode == 0, version.stderr
        assert re.fullmatch(rf"{command} \d+\.\d+\.\d+\S*", version.stdout.strip()), version.stdout


@pytest.mark.parametrize("box", ["thor", "spark"])
def test_check_config_on_the_shipped_examples(installed: Installed, box: str) -> None:
    """The examples inside the installed package, laid out as docs/install.md says (secret files 0600)."""
    data = Path(
        installed.python("import supervisor, pathlib; print(pathlib.Path(supervisor.__file__).parent)")
    )
    example = data / "data" / "examples" / box
    assert example.is_relative_to(installed.venv)
    etc = installed.cwd / f"etc-{box}"
    text = (example / "daemon.yaml").read_text(encoding="utf-8").replace("/etc/vllm-supervisor", str(etc))
    shutil.copytree(example / "profiles", etc / "profiles")
    for name in sorted(set(re.findall(r"_file: " + re.escape(str(etc)) + r"/([\w./-]+)", text))):
        (etc / name).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(etc / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("https://chat.invalid/placeholder\n")
    (etc / "daemon.yaml").write_text(text, encoding="utf-8")
    proc = installed.run("supervisorctl", "check-config", str(etc / "daemon.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith(f"OK: daemon config {etc / 'daemon.yaml'} (1 profile)")


def test_diagnose_a_real_log(installed: Installed) -> None:
    """A real vLLM 0.32 log of a start that died on a 64 MB /dev/shm, copied outside the repository."""
    log = installed.cwd / LOG.name
    shutil.copy(LOG, log)
    proc = installed.run("supervisorctl", "diagnose", "--log", str(log))
    assert proc.returncode in (0, 1), proc.stderr  # 1: a cause was found
    assert "shm" in proc.stdout.lower(), proc.stdout


def test_the_units_init_writes_come_from_the_installed_package(installed: Installed) -> None:
    """init's units: the installed package's files (the repository's bytes), ExecStart this venv's scripts."""
    code = (
        "from supervisor.offline.init_facts import shipped_units, current_install; import json; "
        "i = current_install(); print(json.dumps([shipped_units(), i.daemon, i.ctl, i.pythonpath]))"
    )
    units, daemon, ctl, pythonpath = json.loads(installed.python(code))
    for name, text in units.items():
        assert text == (ROOT / "systemd" / name).read_text(encoding="utf-8")
    assert daemon == str(installed.venv / "bin" / "vllm-supervisor")
    assert ctl == str(installed.venv / "bin" / "supervisorctl")
    assert pythonpath is None

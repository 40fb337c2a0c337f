"""The facts ``supervisorctl init`` reads before planning: the box, the install, the shipped units, the
existing daemon config and the files of bind sources under /tmp."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
from pathlib import Path

import supervisor
from supervisor.adapters.host.system import MEMINFO, read_meminfo
from supervisor.core.errors import SupervisorError
from supervisor.offline.box import BoxFacts
from supervisor.offline.init_types import UNITS, Disk, InitOptions, Install, TmpFile

DEVICE_TREE_MODELS = (Path("/proc/device-tree/model"), Path("/sys/firmware/devicetree/base/model"))
GIB = 1024**3


class InitError(SupervisorError):
    """init/uninit cannot go on (the message says why and what to do)."""


def read_text(path: Path) -> str:
    """A file's text; any bytes round-trip (surrogateescape: the /tmp copies may be binary)."""
    return path.read_bytes().decode("utf-8", "surrogateescape")


def box_facts() -> BoxFacts:
    """The device-tree model, the GPU names ``nvidia-smi`` lists and MemTotal (each may be unknown)."""
    model = None
    for path in DEVICE_TREE_MODELS:
        try:
            model = path.read_bytes().decode("utf-8", "replace").replace("\x00", "").strip() or None
            break
        except OSError:
            continue
    gpus: tuple[str, ...] = ()
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if proc.returncode == 0:
            gpus = tuple(line.strip() for line in proc.stdout.splitlines() if line.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        total = read_meminfo(MEMINFO).get("MemTotal")
    except SupervisorError:
        total = None
    return BoxFacts(model, gpus, round(total / GIB, 2) if total else None)


def current_install() -> Install:
    """The package's own commands: its venv's scripts, else ``python -m`` with the checkout on PYTHONPATH."""
    pkg = Path(supervisor.__file__).resolve().parent
    bindir = Path(sys.executable).parent
    installed = pkg.is_relative_to(Path(sys.prefix).resolve())
    daemon, ctl = bindir / "vllm-supervisor", bindir / "supervisorctl"
    if installed and daemon.exists() and ctl.exists():
        return Install(str(daemon), str(ctl))
    return Install(
        f"{sys.executable} -m supervisor",
        f"{sys.executable} -m supervisor.cli.main",
        None if installed else str(pkg.parent),
    )


def shipped_units() -> dict[str, str]:
    """The unit files shipped inside the package (supervisor/data/systemd/)."""
    base = importlib.resources.files("supervisor") / "data" / "systemd"
    return {u: (base / u).read_text(encoding="utf-8") for u in UNITS}


#: A bind source under /tmp copied by init: at most this many files and bytes (a config, a patch).
MAX_TMP_FILES = 256
MAX_TMP_BYTES = 64 * 1024 * 1024


def read_tmp_source(source: str) -> tuple[TmpFile, ...]:
    """The files of one bind source under /tmp (a file, or a small directory); () when unreadable."""
    root = Path(source)
    try:
        if root.is_file():
            return (TmpFile("", root.read_bytes(), root.stat().st_mode),)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        if len(files) > MAX_TMP_FILES or sum(p.stat().st_size for p in files) > MAX_TMP_BYTES:
            raise InitError(
                f"bind source {source} is under /tmp and too big to copy ({len(files)} files): move it "
                "out of /tmp (e.g. under /opt), start the container again from there, then run init"
            )
        return tuple(TmpFile(str(p.relative_to(root)), p.read_bytes(), p.stat().st_mode) for p in files)
    except OSError:
        return ()


def read_disk(spec_mounts: list[str], opts: InitOptions) -> Disk:
    """The existing daemon config and the files of the bind sources under /tmp."""
    try:
        existing: str | None = read_text(opts.etc / "daemon.yaml")
    except FileNotFoundError:
        existing = None
    return Disk(existing, {src: read_tmp_source(src) for src in spec_mounts})

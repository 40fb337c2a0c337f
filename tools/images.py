"""Build (once, cached by content hash) the Debian base image the tests and the demo run containers from.

``python -m tools.images base`` prints the tag, building it first if absent. The tag is
``vllm-supervisor-base:<hash of images/base/recipe.txt>`` so a recipe change means a rebuild and
nothing else does.

``python -m tools.images systemd`` builds the image with systemd as PID 1 (``images/systemd/recipe.txt``,
``docker import`` with ``CMD ["/sbin/init"]``) that tests/test_systemd_real.py boots, cached the same way.

``python -m tools.images sim`` builds the simulator image (``SIM_IMAGE``) FROM the base tag with the
classic ``docker build``; it is rebuilt only when the hash of (base tag + simulator sources) differs from
the ``vllm-supervisor.sim-hash`` label of the existing image. ``all`` = base + sim.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "images" / "base" / "recipe.txt"
REPO = "vllm-supervisor-base"
SYSTEMD_RECIPE = ROOT / "images" / "systemd" / "recipe.txt"
SYSTEMD_REPO = "vllm-supervisor-systemd"
SIM_REPO = "vllm-supervisor-sim"
SIM_IMAGE = f"{SIM_REPO}:local"
SIM_DIR = ROOT / "supervisor" / "sim"
#: The simulator's files copied into the image (stdlib only; vllm_sim.py imports its siblings).
SIM_FILES = ("vllm_sim.py", "simlog.py", "simfail.py", "simhttp.py", "simengine.py", "simgen.py")
SIM_HASH_LABEL = "vllm-supervisor.sim-hash"


def _recipe(path: Path = RECIPE) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def base_image_tag() -> str:
    """The tag the current recipe builds to."""
    digest = hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:12]
    return f"{REPO}:{digest}"


def systemd_image_tag() -> str:
    """The tag the current systemd recipe builds to."""
    digest = hashlib.sha256(SYSTEMD_RECIPE.read_bytes()).hexdigest()[:12]
    return f"{SYSTEMD_REPO}:{digest}"


def _mirror() -> str:
    """The Debian mirror this machine's apt uses (no other network is reachable)."""
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in candidates:
        if not path.exists():
            continue
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.strip()
            if line.startswith("URIs:"):
                return line.split()[1]
            if line.startswith("deb ") and "security" not in line:
                parts = line.split()
                url = next((p for p in parts[1:] if "://" in p), None)
                if url:
                    return url
    return "http://deb.debian.org/debian"


def image_exists(tag: str) -> bool:
    res = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False, timeout=60)
    return res.returncode == 0


#: A stable alias of the current base image, for profiles (real-vllm-cpu.yaml) that cannot know the hash.
BASE_LOCAL = f"{REPO}:local"


def _alias_local(tag: str) -> str:
    """Point ``BASE_LOCAL`` at ``tag`` (cheap; done on every ensure)."""
    subprocess.run(["docker", "tag", tag, BASE_LOCAL], check=True, timeout=60, capture_output=True)
    return tag


def _import_recipe(recipe_path: Path, tag: str) -> None:
    """mmdebstrap the recipe's packages into a tarball and ``docker import`` it as ``tag``."""
    recipe = _recipe(recipe_path)
    changes = [f'CMD ["{recipe["cmd"]}"]'] if recipe.get("cmd") else []
    with tempfile.TemporaryDirectory(prefix="vsup-image-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(
            [
                "mmdebstrap",
                "--quiet",
                f"--variant={recipe.get('variant', 'minbase')}",
                f"--include={recipe['packages']}",
                recipe.get("suite", "bookworm"),
                str(tarball),
                _mirror(),
            ],
            check=True,
            timeout=1200,
        )
        change_args = [arg for c in changes for arg in ("-c", c)]
        argv = ["docker", "import", *change_args, str(tarball), tag]
        subprocess.run(argv, check=True, timeout=600, capture_output=True)


def ensure_base_image() -> str:
    """Return the base image tag, building it with mmdebstrap + docker import if it is missing."""
    tag = base_image_tag()
    if not image_exists(tag):
        _import_recipe(RECIPE, tag)
    return _alias_local(tag)


def ensure_systemd_image() -> str:
    """Return the systemd-as-PID-1 image tag, building it (about 20 s) if it is missing."""
    tag = systemd_image_tag()
    lock_path = Path(tempfile.gettempdir()) / "vllm-supervisor-systemd-image.lock"
    with open(lock_path, "a+b") as lock:  # one builder at a time across concurrent test sessions
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not image_exists(tag):
            _import_recipe(SYSTEMD_RECIPE, tag)
    return tag


def sim_hash(base_tag: str) -> str:
    """Content hash of the simulator image: base tag + name and bytes of every simulator file."""
    h = hashlib.sha256(base_tag.encode())
    for name in SIM_FILES:
        h.update(b"\0" + name.encode() + b"\0" + (SIM_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def _image_label(tag: str, label: str) -> str | None:
    res = subprocess.run(
        ["docker", "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', tag],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return res.stdout.strip() if res.returncode == 0 else None


def sim_image_tag(base_tag: str | None = None) -> str:
    """The content-addressed tag of the simulator image: ``vllm-supervisor-sim:<hash>``."""
    return f"{SIM_REPO}:{sim_hash(base_tag or base_image_tag())}"


def ensure_sim_image() -> str:
    """The content-addressed simulator tag, built from the base image if missing; ``SIM_IMAGE`` (the
    stable alias the demo profile names) is pointed at it too. A tag per content hash means concurrent
    checkouts with different simulator sources never run each other's simulator."""
    base = ensure_base_image()
    want = sim_hash(base)
    tag = f"{SIM_REPO}:{want}"
    lock_path = Path(tempfile.gettempdir()) / "vllm-supervisor-sim-image.lock"
    with open(lock_path, "a+b") as lock:  # one builder at a time across concurrent test sessions
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _image_label(tag, SIM_HASH_LABEL) != want:
            with tempfile.TemporaryDirectory(prefix="vsup-sim-") as tmp:
                for name in SIM_FILES:
                    shutil.copyfile(SIM_DIR / name, Path(tmp) / name)
                dockerfile = (
                    f"FROM {base}\n"
                    f"COPY {' '.join(SIM_FILES)} /opt/vllm-sim/\n"
                    "ENV PYTHONDONTWRITEBYTECODE=1\n"
                    "EXPOSE 8000\n"
                    f'LABEL {SIM_HASH_LABEL}="{want}"\n'
                    'ENTRYPOINT ["python3", "-u", "/opt/vllm-sim/vllm_sim.py"]\n'
                )
                (Path(tmp) / "Dockerfile").write_text(dockerfile, encoding="utf-8")
                env = {**os.environ, "DOCKER_BUILDKIT": "0"}
                subprocess.run(
                    ["docker", "build", "-q", "-t", tag, tmp],
                    check=True,
                    timeout=600,
                    capture_output=True,
                    env=env,
                )
        if _image_label(SIM_IMAGE, SIM_HASH_LABEL) != want:
            subprocess.run(["docker", "tag", tag, SIM_IMAGE], check=True, timeout=60, capture_output=True)
    return tag


def main(argv: list[str]) -> int:
    if argv[1:] == ["base"]:
        print(ensure_base_image())
        return 0
    if argv[1:] == ["sim"]:
        print(ensure_sim_image())
        return 0
    if argv[1:] == ["all"]:
        print(ensure_base_image())
        print(ensure_sim_image())
        return 0
    if argv[1:] == ["systemd"]:
        print(ensure_systemd_image())
        return 0
    if argv[1:] == ["base-tag"]:
        print(base_image_tag())
        return 0
    print("usage: python -m tools.images base|base-tag|sim|systemd|all", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

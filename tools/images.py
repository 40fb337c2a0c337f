"""Build (once, cached by content hash) the Debian base image the tests and the demo run containers from.

``python -m tools.images base`` prints the tag, building it first if absent. The tag is
``vllm-supervisor-base:<hash of images/base/recipe.txt>`` so a recipe change means a rebuild and
nothing else does.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "images" / "base" / "recipe.txt"
REPO = "vllm-supervisor-base"


def _recipe() -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in RECIPE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def base_image_tag() -> str:
    """The tag the current recipe builds to."""
    digest = hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:12]
    return f"{REPO}:{digest}"


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


def ensure_base_image() -> str:
    """Return the base image tag, building it with mmdebstrap + docker import if it is missing."""
    tag = base_image_tag()
    if image_exists(tag):
        return tag
    recipe = _recipe()
    with tempfile.TemporaryDirectory(prefix="vsup-base-") as tmp:
        tarball = Path(tmp) / "base.tar"
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
        subprocess.run(["docker", "import", str(tarball), tag], check=True, timeout=600, capture_output=True)
    return tag


def main(argv: list[str]) -> int:
    if argv[1:] == ["base"]:
        print(ensure_base_image())
        return 0
    if argv[1:] == ["base-tag"]:
        print(base_image_tag())
        return 0
    print("usage: python -m tools.images base|base-tag", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

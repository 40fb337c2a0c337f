"""The unit's capabilities are the ones the daemon uses (issue 39 item 8): the /dev/shm sweep removes
another user's segment in a sticky root-owned directory without CAP_FOWNER (so the unit drops it), and
signalling another user's process needs CAP_KILL (so the unit keeps it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)

SWEEP = """
import sys
from pathlib import Path
from supervisor.adapters.host.shm import sweep_shm
result = sweep_shm(Path(sys.argv[1]))
print([r.name for r in result.removed], list(result.warnings))
"""


def _without(cap: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` as root with ``cap`` out of the bounding set (so out of every set of the new process)."""
    return subprocess.run(
        ["setpriv", f"--bounding-set=-{cap}", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


def test_the_shm_sweep_removes_another_users_segment_without_cap_fowner(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    shm.chmod(0o1777)  # like /dev/shm: sticky, root's
    seg = shm / "psm_leaked"
    seg.write_bytes(b"x" * 4096)
    os.chown(seg, 65534, 65534)
    out = _without("fowner", sys.executable, "-c", SWEEP, str(shm))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("['psm_leaked']"), out.stdout
    assert not seg.exists()


def test_signalling_another_users_process_needs_cap_kill() -> None:
    victim = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
    try:
        code = f"import os, signal; os.kill({victim.pid}, 0); print('allowed')"
        out = _without("kill", sys.executable, "-c", code)
        assert out.returncode != 0
        assert "PermissionError" in out.stderr
        assert _without("fowner", sys.executable, "-c", code).stdout.strip() == "allowed"
    finally:
        victim.kill()
        victim.wait(10)

"""tools/ports.py: ports handed to the test processes of one machine never collide, across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: take 300 ports, say them, hold them until told to go (stdin closed)
TAKE = (
    "import sys\nfrom tools.ports import free_port\n"
    "print(' '.join(str(free_port()) for _ in range(300)), flush=True)\nsys.stdin.read()\n"
)


def _take(claims: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "VSUP_PORT_CLAIMS": str(claims), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", TAKE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_two_processes_never_get_the_same_port_and_claims_go_with_them(tmp_path: Path) -> None:
    """Two live processes taking 300 ports each share none; their claims are gone when they exit."""
    claims = tmp_path / "claims"
    procs = [_take(claims), _take(claims)]
    outs = [p.stdout.readline() if p.stdout else "" for p in procs]  # both hold their ports now
    for p in procs:
        p.communicate("", timeout=60)
    assert [p.returncode for p in procs] == [0, 0]
    a, b = ({int(x) for x in out.split()} for out in outs)
    assert len(a) == len(b) == 300
    assert a.isdisjoint(b)
    assert list(claims.iterdir()) == []


def test_a_dead_owners_claim_is_cleared_and_that_port_skipped(tmp_path: Path) -> None:
    """A claim file left by a process that is gone does not block the port for ever."""
    claims = tmp_path / "claims"
    claims.mkdir()
    code = "import os; print(os.getpid())"
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    stale = claims / "1"
    stale.write_text(dead.stdout.strip(), encoding="ascii")
    env = {**os.environ, "VSUP_PORT_CLAIMS": str(claims), "PYTHONPATH": str(ROOT)}
    code = "from tools import ports\nprint(ports._claim(1), ports._claim(1))\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]  # skipped once (cleared), then taken

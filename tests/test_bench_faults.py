"""CI's short fault matrix: `python -m bench.faults --quick` on a subset, every row must pass."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.harness import REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SUBSET = (
    "container_sigkill",
    "exit_0_without_log_lines",
    "engine_stuck",
    "startup_oom",
    "memory_floor",
    "daemon_sigkill_mid_run",
    "malformed_profile",
    "operator_docker_stop",
)


def test_quick_fault_matrix_subset_passes(sim_image: str) -> None:
    """Each fault of the subset ends in the state it must (real daemon, Docker, simulator, webhook)."""
    assert sim_image
    cmd = [sys.executable, "-m", "bench.faults", "--quick", "--json", "--only", ",".join(SUBSET)]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=170, check=False)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    rows = {c["case"]: c for c in doc["cases"]}
    assert set(rows) == set(SUBSET), out.stderr[-2000:]
    failed = {n: c["detail"] for n, c in rows.items() if not c["passed"]}
    assert not failed, f"{failed}\n{out.stderr[-2000:]}"
    assert out.returncode == 0
    quiet = (
        "malformed_profile",
        "daemon_sigkill_mid_run",
    )  # an adoption is not news; check-config has no daemon
    alerts = {n: c["alerts"][0] for n, c in rows.items()}
    assert all(a >= 1 for n, a in alerts.items() if n not in quiet), alerts
    assert all(alerts[n] == 0 for n in quiet), alerts

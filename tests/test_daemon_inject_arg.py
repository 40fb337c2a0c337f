"""``api_key.inject_arg``: the real daemon puts the key file's key after ``--api-key`` in the command.

What ``supervisorctl init`` writes for a container started with ``--api-key`` on its command line: the
profile holds a placeholder, the created container the key; probes authenticate; a drift line about the
command shows the key masked. Simulator container and daemon from tests/sim_world.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from tests.daemon_harness import sim_args, write_daemon_config, write_profile
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ARGS = sim_args()
KEYED = [*ARGS, "--api-key", "<api_key.file>"]


def test_key_goes_in_its_place_on_the_command_line_and_drift_masks_it(world: World) -> None:
    """Cmd carries the key after --api-key; auth enforced; RUNNING; diff of an edited command masks it."""
    spec = world.profile(
        api_key=False,
        args=list(KEYED),
        env={"VSIM_FLAVOR": "v0_11"},  # prints the key in clear (0.32: '***'): the log check below bites
        extra={"api_key": {"file": "p.key", "generate": True, "inject_arg": "--api-key"}},
    )
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    key = world.key()
    cmd = world.container().attrs["Config"]["Cmd"]
    assert cmd[cmd.index("--api-key") + 1] == key
    assert "VLLM_API_KEY=" + key not in world.container().attrs["Config"]["Env"]
    models = world.url() + "/v1/models"
    assert requests.get(models, timeout=10).status_code == 401
    assert requests.get(models, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
    assert d.status("p")["drift"] == []

    spec.args = [*KEYED, "--seed", "7"]
    write_daemon_config(world.tmp, [write_profile(world.tmp, spec, world.res.test_id)])
    assert d.call("reload")["ok"]
    st = d._wait_status("p", lambda s: bool(s["drift"]), 30, "drift marked")
    assert st["drift"] == ["command"]
    assert st["container_id"] == cid
    argv = [sys.executable, "-m", "supervisor.cli", "--socket", str(d.socket), "diff", "p"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "--seed" in out.stdout
    assert "'<secret>'" in out.stdout  # the one mask (core/spec/secrets.py)
    assert key not in out.stdout + d.log_tail(10_000)
    assert key not in str(d.events("p"))

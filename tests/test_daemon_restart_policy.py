"""The real daemon adopting a container that Docker restarts too (``--restart unless-stopped``) warns.

Simulator container and daemon from tests/sim_world.py; the policy is set with the real Docker engine.
"""

from __future__ import annotations

import pytest

from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_adopting_a_container_with_a_docker_restart_policy_warns(world: World) -> None:
    """Same container adopted (no bounce), event adopt.restart_policy with the policy; none when it is no."""
    world.profile()
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    assert "adopt.restart_policy" not in d.event_names("p")  # containers the daemon creates are "no"
    assert d.terminate() == 0
    world.container().update(restart_policy={"Name": "unless-stopped"})
    d.start()
    st = d.wait_state("p", "RUNNING", 30)
    assert st["container_id"] == cid
    assert st["adopted"] is True
    assert "adopt.restart_policy" in d.event_names("p")

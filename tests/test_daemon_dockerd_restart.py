"""dockerd restarting (an engine upgrade, a crash of dockerd) stops every container with SIGTERM on its way
down; that is nobody's manual stop: the daemon must serve again once the engine is back. This test restarts
the machine's real dockerd (it is this test run's own engine in CI)."""

from __future__ import annotations

import pytest

from bench.dockerd import restart_dockerd
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.exclusive]  # restarts the shared dockerd


def test_a_dockerd_restart_is_not_a_manual_stop(world: World) -> None:
    """The container stopped by dockerd's shutdown is started again (a new one), no breaker record."""
    world.profile()
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    restart_dockerd()
    st = d.wait_recovered("p", first, 120)
    assert st["intent"] == "run"
    assert st["breaker"]["emergencies"] == 0
    names = d.event_names("p")
    assert "container.stopped_by_docker_restart" in names
    assert "container.stopped_externally" not in names
    wait_for(lambda: d.status("p")["state"] == "RUNNING", 30, message="still RUNNING")

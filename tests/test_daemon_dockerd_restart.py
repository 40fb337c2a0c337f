"""dockerd restarting (an engine upgrade) stops every container with SIGTERM on its way down; dockerd
crashing leaves them running, and the dockerd started again stops them with SIGTERM as it comes up. Neither
is anybody's manual stop, nor an engine failure: the daemon must serve again once the engine is back, with
no emergency and no breaker record. These tests restart and crash the machine's real dockerd (it is this
test run's own engine in CI)."""

from __future__ import annotations

import signal

import pytest

from bench.dockerd import restart_dockerd
from tests.daemon_harness import DaemonProc
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.exclusive]  # restarts the shared dockerd


def test_a_dockerd_restart_is_not_a_manual_stop(world: World) -> None:
    """The container stopped by dockerd's shutdown is started again (a new one), no breaker record."""
    world.profile()
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    restart_dockerd()
    _served_again_as_nobodys_stop(d, first)
    wait_for(lambda: d.status("p")["state"] == "RUNNING", 30, message="still RUNNING")


def test_a_dockerd_crash_is_neither_a_manual_stop_nor_an_emergency(world: World) -> None:
    """dockerd SIGKILLed: its port proxy goes with it, so the probes fail while Docker is away; the dockerd
    started again stops the container it finds with SIGTERM while Docker answers all along, which looks
    like an operator's `docker stop`. Docker was just away: a new container serves, nothing held as manual,
    no emergency."""
    world.profile()
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]

    def daemon_saw_docker_go() -> None:
        wait_for(lambda: "docker.lost" in d.event_names("p"), 60, message="the daemon to see Docker go")

    restart_dockerd(sig=signal.SIGKILL, while_down=daemon_saw_docker_go)
    names = _served_again_as_nobodys_stop(d, first)
    assert "docker.back" in names


def _served_again_as_nobodys_stop(d: DaemonProc, first: str) -> list[str]:
    """RUNNING again in a new container, intent still run, no emergency, dockerd's stop (not a manual one);
    the profile's event names."""
    st = d.wait_recovered("p", first, 120)
    assert st["intent"] == "run"
    assert st["breaker"]["emergencies"] == 0
    names = d.event_names("p")
    assert "container.stopped_by_docker_restart" in names
    assert "container.stopped_externally" not in names
    return names

"""A reload with a broken file is refused whole and the daemon keeps serving (real daemon, simulator)."""

from __future__ import annotations

import signal

import pytest

from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_reload_of_a_non_utf8_daemon_config_is_refused_and_serving_goes_on(world: World) -> None:
    """The daemon config gets a latin-1 byte: `reload` and SIGHUP are refused naming the file, the daemon
    lives on, the container is untouched, and the fixed file reloads."""
    world.profile()
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    good = d.config.read_bytes()
    d.config.write_bytes(good + b"# caf\xe9\n")
    refused = d.call("reload")
    assert not refused["ok"]
    assert str(d.config) in refused["error"]
    assert "is not valid UTF-8" in refused["error"]
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    d._wait_status(
        "p",
        lambda s: sum(e["name"] == "config.reload_refused" for e in d.events()) >= 2,
        30,
        "the SIGHUP reload refused too",
    )
    assert d.proc.poll() is None
    st = d.status("p")
    assert (st["state"], st["container_id"]) == ("RUNNING", cid)
    assert world.container().id == cid
    d.config.write_bytes(good)
    assert d.call("reload")["ok"]

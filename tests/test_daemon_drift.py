"""Drift and reload end to end: the real daemon, real Docker, simulator containers, the real CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import pytest

from supervisor.sim.launch import sim_image
from tests.daemon_harness import DaemonProc, sim_args, write_daemon_config, write_profile
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _ctl(d: DaemonProc, *args: str) -> subprocess.CompletedProcess[str]:
    """``supervisorctl --socket ... ARGS`` as a separate process."""
    argv = [sys.executable, "-m", "supervisor.cli", "--socket", str(d.socket), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _rewrite(world: World, names: list[str] | None = None, **cfg: Any) -> None:
    """Write the profiles (all, or ``names``) and the daemon config again, as an operator edits them."""
    specs = [world.specs[n] for n in (names or list(world.specs))]
    paths = [write_profile(world.tmp, s, world.res.test_id) for s in specs]
    write_daemon_config(world.tmp, paths, **cfg)


def test_edited_profile_is_marked_not_bounced_and_diff_masks_secrets(world: World) -> None:
    """reload of an edited profile: drift in status and table, diff exit 1, secrets masked, no bounce."""
    spec = world.profile(env={"HF_TOKEN": "hf-secret-one", "VSIM_NOTE": "a"})
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    clean = _ctl(d, "diff", "p")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "matches" in clean.stdout
    assert d.status("p")["drift"] == []

    spec.env.update({"HF_TOKEN": "hf-secret-two", "VSIM_NOTE": "b"})
    spec.args = sim_args()
    spec.args += ["--seed", "7"]
    _rewrite(world)
    reply = d.call("reload")
    assert reply["ok"], reply
    assert "changed p" in reply["data"]["message"]
    st = d._wait_status("p", lambda s: bool(s["drift"]), 30, "drift marked")
    assert st["drift"] == ["command", "env"]
    assert st["state"] == "RUNNING"
    assert st["container_id"] == cid
    assert world.container().id == cid
    assert world.container().status == "running"

    out = _ctl(d, "diff", "p")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "HF_TOKEN: profile <secret>, container <secret>" in out.stdout
    assert "VSIM_NOTE: profile 'b', container 'a'" in out.stdout
    assert "--seed" in out.stdout
    assert "hf-secret" not in out.stdout + d.log_tail(10_000)
    assert world.key() not in out.stdout
    table = _ctl(d, "status")
    assert "RUNNING DRIFT" in table.stdout, table.stdout
    drift_events = [e for e in d.events("p") if e["name"] == "container.drift"]
    assert len(drift_events) == 1
    assert "hf-secret" not in str(drift_events)


def test_restarted_daemon_adopts_an_edited_profile_with_drift(world: World) -> None:
    """Daemon stopped, profile edited, daemon started: the container is adopted and marked, never bounced."""
    spec = world.profile()
    d = world.daemon()
    cid = d.wait_state("p", "RUNNING", 60)["container_id"]
    assert d.terminate() == 0
    spec.extra_container = {"shm_size": "128m"}
    _rewrite(world)
    d.start()
    st = d._wait_status("p", lambda s: s["state"] == "RUNNING" and bool(s["drift"]), 60, "adopted with drift")
    assert st["drift"] == ["resources"]
    assert st["adopted"] is True
    assert st["container_id"] == cid
    out = _ctl(d, "diff", "p")
    assert out.returncode == 1, out.stdout
    assert "shm_size" in out.stdout


def test_sighup_adds_starts_removes_and_refuses_a_broken_config(world: World) -> None:
    """SIGHUP: an added profile starts, a removed one keeps running and is reported; errors change nothing."""
    world.profile("a")
    world.profile("b")
    d = world.daemon()
    d.wait_state("a", "RUNNING", 60)
    b_id = d.wait_state("b", "RUNNING", 60)["container_id"]

    world.profile("c")
    _rewrite(world, ["a", "c"])
    assert d.proc is not None
    d.proc.send_signal(signal.SIGHUP)
    d.wait_state("c", "RUNNING", 60)
    removed = [e for e in d.events() if e["name"] == "config.profile_removed"]
    assert [(e["profile"], e["fields"]["container"]) for e in removed] == [("b", world.specs["b"].container)]
    doc = d.call("status")["data"]
    assert [p["name"] for p in doc["profiles"]] == ["a", "c"]
    assert doc["daemon"]["removed_profiles"] == [{"name": "b", "container": world.specs["b"].container}]
    assert world.container("b").id == b_id
    assert world.container("b").status == "running"
    assert "removed from the config: b" in _ctl(d, "status").stdout
    assert not d.call("start", name="b")["ok"]  # no longer supervised

    (world.tmp / "c.yaml").write_text("name: c\ncontainer: {image: 5, bogus: 1}\n", encoding="utf-8")
    refused = d.call("reload")
    assert not refused["ok"]
    assert "nothing changed" in refused["error"]
    assert "c.yaml" in refused["error"]
    assert "bogus" in refused["error"]
    assert [p["name"] for p in d.call("status")["data"]["profiles"]] == ["a", "c"]
    assert d.status("c")["state"] == "RUNNING"
    assert "config.reload_refused" in [e["name"] for e in d.events()]


def test_an_image_tag_that_moved_is_not_drift(world: World, base_image: str) -> None:
    """The container is judged against the image it runs: re-tagging the profile's image changes nothing."""
    tag = f"vsup-drift-tag:{world.res.test_id[-20:].lower()}"
    client = world.res.client
    client.images.get(sim_image()).tag(tag)  # this run's own build, not the shared alias
    try:
        world.profile(image=tag)
        d = world.daemon()
        d.wait_state("p", "RUNNING", 60)
        client.images.get(base_image).tag(tag)  # the tag now names another image (other env, labels)
        out = _ctl(d, "diff", "p")
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        client.images.remove(tag, noprune=True)

"""Patch-set custody end to end: the real daemon, real Docker, simulator containers with a bind-mounted
"patched" file laid over the image's own (/opt/vllm-sim/simgen.py, same content plus comments)."""

from __future__ import annotations

import hashlib
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor.core.spec.patchset import OVERLAY_DIAGNOSIS
from supervisor.sim.launch import sim_image
from tests.daemon_harness import DaemonProc, write_profile
from tests.harness import wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SIM_DIR = Path(__file__).resolve().parent.parent / "supervisor" / "sim"
TARGET = "/opt/vllm-sim/simgen.py"


def _ctl(d: DaemonProc, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "supervisor.cli", "--socket", str(d.socket), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _patch(world: World) -> Path:
    """The "patched vLLM file": the image's own simgen.py (so the simulator still runs), outside it."""
    path = world.tmp / "patches" / "simgen.py"
    path.parent.mkdir()
    path.write_bytes((SIM_DIR / "simgen.py").read_bytes())
    return path


def _saved(d: DaemonProc, fingerprint: str | None = None) -> dict[str, Any]:
    """The status once the last known good of the running container is saved (``fingerprint``: this one)."""
    return d._wait_status(
        "p",
        lambda s: (
            s["state"] == "RUNNING"
            and s["last_known_good"]["fingerprint"] is not None
            and s["last_known_good"]["fingerprint"] == (fingerprint or s["kv_pool"]["fingerprint"])
        ),
        60,
        "last known good saved",
    )


def test_editing_a_bind_mounted_file_is_drift_and_a_new_fingerprint(world: World) -> None:
    """An edited patch file marks the running container DRIFT (no reload, no bounce), `diff` names the
    target; the restart runs it under a new fingerprint, and the old content's copy is collected."""
    patch = _patch(world)
    pdir = world.tmp / "patchdir"
    pdir.mkdir()
    (pdir / "extra.py").write_text("A = 1\n", encoding="utf-8")
    world.profile(extra_container={"mounts": [f"{patch}:{TARGET}:ro", f"{pdir}:/opt/patchdir:ro"]})
    d = world.daemon()
    st = _saved(d)
    cid, fp1 = st["container_id"], st["kv_pool"]["fingerprint"]
    copies = world.tmp / "state" / "patches"
    old_sha = _sha(patch)
    assert stat.S_IMODE((copies / old_sha).stat().st_mode) == 0o600
    assert (copies / old_sha).read_bytes() == patch.read_bytes()
    assert (copies / _sha(pdir / "extra.py")).exists()
    assert TARGET in world.container().labels["vllm-supervisor.patches"]
    clean = _ctl(d, "diff", "p")
    assert clean.returncode == 0, clean.stdout + clean.stderr

    patch.write_bytes(patch.read_bytes() + b"\n# patched again\n")
    st = d._wait_status("p", lambda s: s["drift"] == ["patches"], 60, "patch drift")
    assert st["container_id"] == cid
    assert st["state"] == "RUNNING"
    assert world.container().id == cid
    out = _ctl(d, "diff", "p")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"patches {TARGET}: profile file {_sha(patch)[:16]}, container file {old_sha[:16]}" in out.stdout
    assert "/opt/patchdir" not in out.stdout  # unchanged
    assert "RUNNING DRIFT" in _ctl(d, "status").stdout

    assert d.call("restart", name="p")["ok"]
    wait_for(lambda: d.status("p")["container_id"] not in (None, cid), 60, message="restarted")
    st = _saved(d)
    assert st["kv_pool"]["fingerprint"] != fp1
    assert st["drift"] == []
    wait_for(lambda: not (copies / old_sha).exists(), 20, message="the old copy collected")
    assert (copies / _sha(patch)).read_bytes() == patch.read_bytes()


def test_rollback_restores_the_patch_file(world: World) -> None:
    """A failing change (new patch content + the simulator's failure knob): after two failed starts the
    last known good starts, with the patch file written back as it was (its fingerprint again)."""
    patch = _patch(world)
    good_bytes = patch.read_bytes()
    spec = world.profile(
        extra_container={"mounts": [f"{patch}:{TARGET}:ro"]},
        extra={"rollback_after": 2, "on_failed_change": "rollback"},
    )
    d = world.daemon(breaker_limit=4)
    st = _saved(d)
    cid, fp1 = st["container_id"], st["kv_pool"]["fingerprint"]

    patch.write_bytes(good_bytes + b"\n# a patch that breaks the engine\n")
    spec.env["VSIM_SCENARIO"] = "fail_engine_init"
    write_profile(world.tmp, spec, world.res.test_id)
    assert d.call("reload")["ok"]
    assert d.call("restart", name="p")["ok"]
    st = d._wait_status(
        "p",
        lambda s: (
            s["state"] == "RUNNING" and s["running_spec"] == "last_known_good" and s["container_id"] != cid
        ),
        120,
        "rolled back",
    )
    assert patch.read_bytes() == good_bytes
    assert st["kv_pool"]["fingerprint"] == fp1
    assert "last_good.patches_restored" in d.log_tail(200_000)


def test_an_overlay_target_missing_in_a_new_image_fails_the_start(world: World, base_image: str) -> None:
    """The profile's tag moves to an image without the overlay's target: the start fails before any
    model-server container is created, with its own outcome naming that target (not the file the
    profile adds, missing in both images); the check's container is removed."""
    tag = f"vsup-overlay:{world.res.test_id[-20:].lower()}"
    client = world.res.client
    client.images.get(sim_image()).tag(tag)  # this run's own build, not the shared alias
    try:
        patch = _patch(world)
        added = world.tmp / "added.py"  # a file the profile adds (in neither image): not an overlay
        added.write_text("ADDED = 1\n", encoding="utf-8")
        mounts = [f"{patch}:{TARGET}:ro", f"{added}:/opt/added/added.py:ro"]
        world.profile(image=tag, extra_container={"mounts": mounts})
        d = world.daemon(breaker_limit=4)
        _saved(d)
        client.images.get(base_image).tag(tag)  # the "image bump": no /opt/vllm-sim in it
        assert d.call("restart", name="p")["ok"]

        def failed() -> list[dict[str, object]]:
            rows = d.call("history", name="p", n=10)["data"]["starts"]
            return [r for r in rows if r["outcome"] == "failed_overlay_missing"]

        row = wait_for(failed, 60, message="failed_overlay_missing row")[0]
        assert row["diagnosis"] == OVERLAY_DIAGNOSIS
        assert row["fingerprint"] is not None  # a change: counted against the last known good
        assert row["container_id"] is None  # no model-server container was created
        failures = [e["fields"] for e in d.events("p") if e["name"] == "start.failed"]
        new_id = str(client.images.get(base_image).id)
        reason = f"overlay target missing: image {tag} ({new_id[:19]}) has no {TARGET}"
        assert failures[-1]["detail"] == reason
        assert failures[-1]["outcome"] == "failed_overlay_missing"
        left = client.containers.list(all=True, filters={"label": "vllm-supervisor.overlay-check"})
        assert left == []
    finally:
        client.images.remove(tag, noprune=True)

"""Restore on a box where a load takes minutes: deadline-long wait with progress, the host's load slot,
memory settle, the exact image, and never racing a daemon that owns the container (docs/snapshot.md)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import docker
import pytest
import requests
import yaml

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host.system import LoadLock
from supervisor.config import HostConfig
from supervisor.core.errors import SnapshotError
from supervisor.offline.restore import RestoreContext, restore
from supervisor.offline.restore_rules import (
    LoadProgress,
    choose_image,
    load_deadline,
    owning_profile,
    slot_holder_text,
)
from supervisor.offline.snapshot import snapshot
from tests.conftest import Resources
from tests.harness import free_port, wait_for
from tests.sim_world import World

KEY = "sk-restore-boxes-SECRET-7f3a"


# -- pure rules ----------------------------------------------------------------------------------------
def test_choose_image_pins_the_id_the_container_ran() -> None:
    """Tag still on the id: the tag; tag moved or gone: the id with a warning; id gone: the tag, warned."""
    assert choose_image("m:1", "sha256:a", True, "sha256:a").ref == "m:1"
    assert choose_image("m:1", "sha256:a", True, "sha256:a").warning is None
    moved = choose_image("m:1", "sha256:a", True, "sha256:b")
    assert moved.ref == "sha256:a"
    assert moved.warning == "tag m:1 now names sha256:b; restoring the exact image sha256:a it ran"
    untagged = choose_image("m:1", "sha256:a", True, None)
    assert (untagged.ref, "names no local image" in str(untagged.warning)) == ("sha256:a", True)
    gone = choose_image("m:1", "sha256:a", False, "sha256:b")
    assert gone.ref == "m:1"
    assert "sha256:a it ran is gone; restoring from tag m:1, now sha256:b" in str(gone.warning)
    assert "pull m:1" in str(choose_image("m:1", "sha256:a", False, None).warning)
    assert choose_image("m:1", None, False, "sha256:b") == choose_image("m:1", "", False, None)


def test_load_deadline_order() -> None:
    """--wait, else the snapshot profile's own deadline, else the daemon profile's, else 30 min."""
    assert load_deadline(5.0, 60.0, 90.0) == (5.0, "--wait")
    assert load_deadline(None, 60.0, 90.0)[0] == 60.0
    assert load_deadline(None, None, 90.0) == (90.0, "startup.deadline_s of the daemon profile")
    assert load_deadline(None, None, None) == (1800.0, "default")


def test_owner_and_slot_holder_texts() -> None:
    """A status document's profile names the container's owner; the lock note reads as a sentence."""
    doc = {"profiles": [{"name": "qwen", "container": "vllm-qwen"}, "junk"]}
    assert owning_profile("vllm-qwen", doc) == "qwen"
    assert owning_profile("other", doc) is None
    note = {"pid": 42, "owner": "daemon profile qwen", "since": 1000.0}
    assert slot_holder_text(note, 1200.0) == "daemon profile qwen (pid 42, for 3 min)"
    assert slot_holder_text(None, 0.0) == "another process (it left no note)"


def test_load_progress_reads_shards_and_phases_from_simulator_lines() -> None:
    """Shard bars give percent lines (once each), phases one line each; failures are named."""
    from supervisor.sim import simlog

    fmt = simlog.LogFormat(simlog.FLAVORS["v0_32"], 100, 200)
    lines = [seg for done in range(5) for _, seg in simlog.shard_lines(fmt, done, 4, done * 1.0, 1.0)]
    progress = LoadProgress()
    twice = [raw for raw in lines for _ in range(2)]  # a repeated bar (tqdm redraw) says nothing new
    said = [t for raw in twice if (t := progress.feed(raw.lstrip("\r"))) is not None]
    assert said == [f"loading weights: {p}% (shard {d}/4)" for d, p in enumerate((0, 25, 50, 75, 100))]
    progress.feed(lines[0].lstrip("\r"))
    assert progress.status(125, 1800) == "still loading after 2 min (deadline 30 min): loading weights 0%"
    assert progress.feed("INFO:     Application startup complete.") == "application startup complete"
    assert progress.feed("INFO:     Application startup complete.") is None


# -- real Docker with the simulator ------------------------------------------------------------------------
def _ctx(tmp: Path, **host: Any) -> RestoreContext:
    """A test's own load lock; the shared machine's page cache is left alone."""
    return RestoreContext(HostConfig(drop_caches=False, load_lock_path=tmp / "load.lock", **host))


def _sim(res: Resources, image: str, port: int, env: dict[str, str] | None = None) -> str:
    """A hand-made simulator container (like a user's `docker run`), healthy; its name."""
    c = res.client.containers.run(
        image,
        ["--served-model-name", "box-model", "--port", "8000"],
        name=res.name("box"),
        environment={"VLLM_API_KEY": KEY, "VSIM_LOAD_SECONDS": "1", **(env or {})},
        labels=res.labels,
        ports={"8000/tcp": ("127.0.0.1", port)},
        detach=True,
    )
    wait_for(lambda: _healthy(port), 60, message="simulator healthy")
    return str(c.name)


def _healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _snap_and_remove(res: Resources, name: str, out: Path, env: dict[str, str] | None = None) -> Path:
    """Snapshot ``name`` into ``out`` (env file edited by ``env``), then remove the container."""
    adapter = DockerAdapter()
    try:
        paths = snapshot(adapter, name, out)
    finally:
        adapter.close()
    if env:
        kept = [
            ln for ln in paths.env.read_text(encoding="utf-8").splitlines() if ln.split("=")[0] not in env
        ]
        paths.env.write_text(
            "\n".join([*kept, *(f"{k}={v}" for k, v in env.items())]) + "\n", encoding="utf-8"
        )
    res.client.containers.get(name).remove(force=True)
    return out


def _ctl(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.docker
def test_slow_load_prints_progress_and_takes_the_daemon_profiles_deadline(
    resources: Resources, sim_image: str, tmp_path: Path
) -> None:
    """`supervisorctl restore --config`: a 12 s load prints shard percents on stderr; the deadline comes from
    the config's profile naming the container (no daemon runs); the key is still enforced."""
    port = free_port()
    name = _sim(resources, sim_image, port)
    out = _snap_and_remove(
        resources, name, tmp_path / "restore", {"VSIM_LOAD_SECONDS": "12", "VSIM_SHARDS": "4"}
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(
        yaml.safe_dump(
            {
                "name": "p",
                "container": {"name": name, "image": sim_image},
                "base_url": f"http://127.0.0.1:{port}",
                "startup": {"deadline_s": 75},
            }
        ),
        encoding="utf-8",
    )
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "state_dir": str(tmp_path / "state"),
                "socket_path": str(tmp_path / "control.sock"),
                "restore_dir": str(out),
                "profiles": [str(profile)],
                "host": {"drop_caches": False, "load_lock_path": str(tmp_path / "load.lock")},
            }
        ),
        encoding="utf-8",
    )
    proc = _ctl("restore", name, "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "no daemon answers now" in err
    assert "waiting up to 1 min (startup.deadline_s of the daemon profile)" in err
    pcts = [
        int(ln.split("loading weights: ")[1].split("%")[0])
        for ln in err.splitlines()
        if "loading weights: " in ln
    ]
    assert pcts == sorted(pcts), err
    assert pcts[-1] == 100, err
    assert len(pcts) >= 3, err
    assert "checking that /v1/models without a key answers 401" in err
    assert "API key: enforced" in proc.stdout
    assert requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 401
    assert KEY not in proc.stdout + proc.stderr


@pytest.mark.docker
def test_restore_waits_for_the_load_slot_held_by_another_holder(
    resources: Resources, sim_image: str, tmp_path: Path
) -> None:
    """A holder of the host's flock makes restore wait (saying who holds it); nothing is created until the
    slot is free; then the restore completes and gives the slot back."""
    port = free_port()
    name = _sim(resources, sim_image, port)
    out = _snap_and_remove(resources, name, tmp_path / "restore")
    holder = LoadLock(tmp_path / "load.lock", owner="test holder")
    assert holder.try_acquire()
    lines: list[str] = []
    result: list[Any] = []
    adapter = DockerAdapter()

    def run() -> None:
        try:
            result.append(restore(adapter, name, out, _ctx(tmp_path), wait_s=60, say=lines.append))
        except SnapshotError as exc:  # reported by the assertions below
            result.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        wait_for(lambda: any("waiting for the load slot held by test holder (pid" in ln for ln in lines), 20)
        assert resources.client.containers.list(all=True, filters={"name": f"^{name}$"}) == []
        holder.release()
        worker.join(90)
        assert not worker.is_alive()
        assert result, "restore returned nothing"
        assert not isinstance(result[0], SnapshotError), result
        assert result[0].auth == "enforced"
        assert any(ln.startswith("took the load slot after") for ln in lines)
        assert holder.try_acquire(), "restore kept the load slot"
    finally:
        holder.release()
        adapter.close()


@pytest.mark.docker
def test_memory_that_does_not_settle_creates_nothing(
    resources: Resources, sim_image: str, tmp_path: Path
) -> None:
    """host.min_mem_available_gib out of reach: restore fails after settle_timeout_s, nothing is created,
    the slot is free again."""
    name = _sim(resources, sim_image, free_port())
    out = _snap_and_remove(resources, name, tmp_path / "restore")
    ctx = _ctx(tmp_path, min_mem_available_gib=100_000.0, settle_timeout_s=2.0)
    lines: list[str] = []
    adapter = DockerAdapter()
    try:
        with pytest.raises(SnapshotError, match=r"below host\.min_mem_available_gib"):
            restore(adapter, name, out, ctx, wait_s=30, say=lines.append)
    finally:
        adapter.close()
    assert any(ln.startswith("waiting for MemAvailable >= 100000 GiB") for ln in lines)
    assert resources.client.containers.list(all=True, filters={"name": f"^{name}$"}) == []
    lock = LoadLock(tmp_path / "load.lock")
    assert lock.try_acquire()
    lock.release()


@pytest.mark.docker
def test_load_past_the_deadline_is_stopped_and_explained(
    resources: Resources, sim_image: str, tmp_path: Path
) -> None:
    """--wait shorter than the load: the container is stopped (no load left running without the slot) and
    the error says how far the log got."""
    name = _sim(resources, sim_image, free_port())
    out = _snap_and_remove(resources, name, tmp_path / "restore", {"VSIM_LOAD_SECONDS": "60"})
    adapter = DockerAdapter()
    try:
        with pytest.raises(SnapshotError, match=r"within 4 s .*the log says: starting"):
            restore(adapter, name, out, _ctx(tmp_path), wait_s=4, say=lambda _t: None)
    finally:
        adapter.close()
    c = resources.client.containers.get(name)
    assert c.attrs["State"]["Running"] is False


@pytest.mark.docker
def test_image_pinned_after_retagging_and_tag_used_when_the_image_is_gone(
    resources: Resources, sim_image: str, tmp_path: Path
) -> None:
    """The tag moved: restore creates from the exact image id the container ran, and warns; that image
    removed: restore uses the tag, and warns."""
    client = resources.client
    tag = f"{resources.name('pin')}:v1"
    built, _ = client.images.build(
        fileobj=io.BytesIO(f"FROM {sim_image}\nLABEL vsup.test={resources.test_id}\n".encode()),
        tag=tag,
        rm=True,
    )
    try:
        port = free_port()
        c = client.containers.run(
            tag,
            ["--served-model-name", "pin-model", "--port", "8000"],
            name=resources.name("pinned"),
            environment={"VLLM_API_KEY": KEY, "VSIM_LOAD_SECONDS": "1"},
            labels=resources.labels,
            ports={"8000/tcp": ("127.0.0.1", port)},
            detach=True,
        )
        name = str(c.name)
        wait_for(lambda: _healthy(port), 60, message="pinned simulator healthy")
        out = _snap_and_remove(resources, name, tmp_path / "restore")
        sim_id = client.images.get(sim_image).id
        client.images.get(sim_image).tag(tag)  # the tag now names another image
        lines: list[str] = []
        adapter = DockerAdapter()
        try:
            res = restore(adapter, name, out, _ctx(tmp_path), wait_s=60, say=lines.append)
            assert res.image_id == built.id
            assert client.api.inspect_container(name)["Image"] == built.id
            assert (
                f"warning: tag {tag} now names {sim_id}; restoring the exact image {built.id} it ran" in lines
            )
            client.containers.get(name).remove(force=True)
            client.images.remove(built.id, force=True)
            lines.clear()
            res = restore(adapter, name, out, _ctx(tmp_path), wait_s=60, say=lines.append)
            assert res.image_id == sim_id
            assert (
                f"warning: the image {built.id} it ran is gone; restoring from tag {tag}, now {sim_id}"
                in lines
            )
            assert client.api.inspect_container(name)["Config"]["Image"] == tag
        finally:
            adapter.close()
    finally:
        for ref in (tag, str(built.id)):
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(ref, force=ref == built.id)


@pytest.mark.docker
def test_daemon_owned_container_is_refused_and_left_alone(world: World, tmp_path: Path) -> None:
    """A running daemon's profile manages the container: restore (even --replace) refuses, naming
    `supervisorctl stop` / `start` of that profile; the daemon's container is untouched."""
    spec = world.profile("owned")
    d = world.daemon()
    d.wait_state("owned", "RUNNING", 90)
    before = world.container("owned").id
    out = tmp_path / "snap"
    adapter = DockerAdapter()
    try:
        snapshot(adapter, spec.container, out)
    finally:
        adapter.close()
    config = tmp_path / "daemon.yaml"
    for extra in ((), ("--replace",)):
        proc = _ctl(
            "restore", spec.container, "--config", str(config), "--from", str(out), *extra, timeout=60
        )
        assert proc.returncode == 1
        assert f"managed by profile owned of the running daemon ({tmp_path / 'control.sock'})" in proc.stderr
        assert "`supervisorctl stop owned` and then `supervisorctl start owned`" in proc.stderr
    assert world.container("owned").id == before
    assert world.container("owned").attrs["State"]["Running"]

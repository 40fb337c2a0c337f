"""Snapshot/restore: pure inspect->spec rules, 0600 files, hostile env values, real round trips on Docker."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import docker
import docker.types
import pytest
import structlog.testing

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.docker.errors import until_reaped
from supervisor.cli.offline import cli_restore, cli_snapshot
from supervisor.config import HostConfig, load_profile
from supervisor.core.errors import SnapshotError
from supervisor.core.spec.model import EnvVar
from supervisor.offline.restore import RestoreContext, restore
from supervisor.offline.snapshot import format_env_file, snapshot, spec_from_inspect
from supervisor.sim import launch
from tests.conftest import Resources
from tests.harness import free_port, wait_for

SECRET = "sk-snap-SECRET-d41e77"
HOSTILE = {
    "SPACES": "a value with  spaces ",
    "EQUALS": "k1=v1=v2",
    "QUOTES": "it's \"quoted\" 'x'",
    "HASH": "#not a comment # really",
    "UNICODE": "Grüße — 日本語 ✓",
    "EMPTY": "",
    "LEADING": "  leading blanks",
    "BACKSLASH": "C:\\path\\n not a newline",
    "DOLLAR": "$HOME ${X} `cmd`",
    "LONG": "x" * 100_000,
}


# -- pure rules -------------------------------------------------------------------------------------------
def _inspect(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Id": "abcdef1234567890",
        "Name": "/srv",
        "Image": "sha256:1",
        "Config": {
            "Image": "img:1",
            "Hostname": "abcdef123456",
            "Env": ["PATH=/usr/bin", "IMG=changed", "MINE=1"],
            "Cmd": ["--port", "8001"],
            "Entrypoint": ["python3", "sim.py"],
            "Labels": {"from.image": "x", "mine": "y"},
            "WorkingDir": "/app",
            "User": "",
        },
        "HostConfig": {
            "NetworkMode": "default",
            "IpcMode": "private",
            "ShmSize": 67108864,
            "Runtime": "runc",
            "Binds": ["/data:/data:ro", "/logs:/logs:rw,rshared", "vol:/v"],
            "PortBindings": {"8001/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18001"}]},
            "RestartPolicy": {"Name": "no"},
        },
    }
    for k, v in over.items():
        section, _, key = k.partition("__")
        base[section][key] = v
    return base


IMAGE_CFG: dict[str, Any] = {
    "Env": ["PATH=/usr/bin", "IMG=orig"],
    "Entrypoint": ["python3", "sim.py"],
    "Labels": {"from.image": "x"},
    "WorkingDir": "/app",
}


def test_spec_from_inspect_drops_docker_defaults_and_image_values() -> None:
    """Image env/labels/entrypoint/workdir, default shm/ipc/network/runtime, id hostname: omitted."""
    spec = spec_from_inspect(_inspect(), IMAGE_CFG["Env"], IMAGE_CFG)
    assert spec.name == "srv"
    assert spec.image == "img:1"
    assert [(e.name, e.value) for e in spec.env] == [("IMG", "changed"), ("MINE", "1")]
    assert spec.labels == (("mine", "y"),)
    assert spec.entrypoint is None
    assert spec.command == ("--port", "8001")
    assert (spec.network_mode, spec.ipc_mode, spec.shm_size, spec.runtime) == (None, None, None, None)
    assert (spec.hostname, spec.working_dir, spec.user) == (None, None, None)
    assert [(m.source, m.target, m.read_only, m.type, m.propagation) for m in spec.mounts] == [
        ("/data", "/data", True, "bind", None),
        ("/logs", "/logs", False, "bind", "rshared"),
        ("vol", "/v", False, "volume", None),
    ]
    assert [(p.container_port, p.host_port, p.host_ip) for p in spec.ports] == [(8001, 18001, "127.0.0.1")]


def test_spec_from_inspect_keeps_user_settings() -> None:
    """Non-default shm/ipc/network/runtime, a changed entrypoint and a real hostname are kept."""
    spec = spec_from_inspect(
        _inspect(
            HostConfig__ShmSize=1 << 30,
            HostConfig__IpcMode="host",
            HostConfig__NetworkMode="mynet",
            HostConfig__Runtime="nvidia",
            Config__Entrypoint=["bash"],
            Config__Hostname="thor",
        ),
        IMAGE_CFG["Env"],
        IMAGE_CFG,
    )
    assert (spec.shm_size, spec.ipc_mode, spec.network_mode, spec.runtime) == (
        1 << 30,
        "host",
        "mynet",
        "nvidia",
    )
    assert spec.entrypoint == ("bash",)
    assert spec.hostname == "thor"


def test_explicit_image_entrypoint_without_cmd_stays_explicit() -> None:
    """Image's entrypoint, no Cmd, image has a Cmd: keep it explicit, or Docker re-adds the Cmd."""
    cfg = {**IMAGE_CFG, "Cmd": ["--help"]}
    spec = spec_from_inspect(_inspect(Config__Cmd=None), cfg["Env"], cfg)
    assert spec.entrypoint == ("python3", "sim.py")
    assert spec.command == ()


def test_host_network_drops_hostname_and_ports() -> None:
    """With --network host Docker copies the host's name and ignores published ports."""
    spec = spec_from_inspect(_inspect(HostConfig__NetworkMode="host", Config__Hostname="vm"), [], IMAGE_CFG)
    assert spec.network_mode == "host"
    assert spec.hostname is None
    assert spec.ports == ()


def test_unset_stop_timeout_and_explicit_rw_are_kept_as_given() -> None:
    """No StopTimeout in the inspect -> None (not 120); ':rw' written out -> rw_explicit; none -> not."""
    spec = spec_from_inspect(_inspect(), IMAGE_CFG["Env"], IMAGE_CFG)
    assert spec.stop_timeout is None
    assert [m.rw_explicit for m in spec.mounts] == [False, True, False]
    spec = spec_from_inspect(_inspect(Config__StopTimeout=45), IMAGE_CFG["Env"], IMAGE_CFG)
    assert spec.stop_timeout == 45


def test_env_file_format_is_literal_and_refuses_newlines() -> None:
    """One KEY=value per line, value verbatim; a newline is refused naming the variable, never the value."""
    text = format_env_file([EnvVar(k, v) for k, v in HOSTILE.items()])
    assert text.split("\n")[:-1] == [f"{k}={v}" for k, v in HOSTILE.items()]
    with pytest.raises(SnapshotError, match="MULTI") as exc:
        format_env_file([EnvVar("MULTI", "line1\nline2-secret")])
    assert "line2-secret" not in str(exc.value)
    with pytest.raises(SnapshotError):
        format_env_file([EnvVar("CR", "a\rb")])
    with pytest.raises(SnapshotError):
        format_env_file([EnvVar("#HASHNAME", "v")])


# -- real Docker --------------------------------------------------------------------------------------
def _ctx(tmp: Path) -> RestoreContext:
    """The test's own load lock; the shared machine's page cache is left alone."""
    return RestoreContext(HostConfig(drop_caches=False, load_lock_path=tmp / "load.lock"))


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def adapter() -> Any:
    """An adapter on the real engine."""
    a = DockerAdapter(timeout=30.0)
    yield a
    a.close()


def _sim(
    client: docker.DockerClient,
    resources: Resources,
    stem: str,
    env: dict[str, str],
    port: int,
    **extra: Any,
) -> Any:
    """A simulator container made by hand (docker SDK), like a user's `docker run` line."""
    args = ["--served-model-name", "snap-model", "--port", "8000", "--max-model-len", "4096"]
    kw: dict[str, Any] = {
        "image": launch.sim_image(),  # this run's own build (conftest sets it), not the shared alias
        "name": resources.name(stem),
        "command": args,
        "environment": env,
        "labels": {**resources.labels, "purpose": "snapshot test"},
        "ports": {"8000/tcp": ("127.0.0.1", port)},
        "detach": True,
    }
    kw.update(extra)
    return client.containers.run(**kw)


def _health(port: int) -> bool:
    import requests

    return requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200


FIELDS = [
    ("Config", "Cmd"),
    ("Config", "Entrypoint"),
    ("Config", "Image"),
    ("Config", "Labels"),
    ("Config", "User"),
    ("Config", "WorkingDir"),
    ("HostConfig", "NetworkMode"),
    ("HostConfig", "IpcMode"),
    ("HostConfig", "ShmSize"),
    ("HostConfig", "Ulimits"),
    ("HostConfig", "Devices"),
    ("HostConfig", "PortBindings"),
    ("HostConfig", "SecurityOpt"),
    ("HostConfig", "CapAdd"),
    ("HostConfig", "Privileged"),
    ("HostConfig", "Runtime"),
    ("HostConfig", "Binds"),
    ("Config", "StopTimeout"),
]


def _compare(orig: dict[str, Any], new: dict[str, Any]) -> None:
    """Every user-settable field equal; env as a set; mounts by source/target/rw/propagation/type."""
    for section, key in FIELDS:
        assert orig[section].get(key) == new[section].get(key), f"{section}.{key} differs"
    assert set(orig["Config"]["Env"] or ()) == set(new["Config"]["Env"] or ())

    def mounts(info: dict[str, Any]) -> list[tuple[Any, ...]]:
        return sorted(
            (m["Type"], m["Source"], m["Destination"], m["RW"], m["Propagation"], m["Mode"])
            for m in info["Mounts"]
        )

    assert mounts(orig) == mounts(new)


@pytest.mark.docker
@pytest.mark.slow
def test_round_trip_simulator(
    docker_client: docker.DockerClient,
    resources: Resources,
    sim_image: str,
    adapter: DockerAdapter,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hand-made sim container -> snapshot (0600 files) -> remove -> restore: same inspect, key enforced."""
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    env = {"VLLM_API_KEY": SECRET, **HOSTILE}
    orig = _sim(
        docker_client,
        resources,
        "round",
        env,
        port,
        volumes={
            str(data): {"bind": "/models", "mode": "ro"},
            str(tmp_path): {"bind": "/scratch", "mode": "rw"},
        },
        shm_size="256m",
        ulimits=[
            docker.types.Ulimit(name="memlock", soft=8388608, hard=8388608),
            docker.types.Ulimit(name="stack", soft=67108864, hard=67108864),
        ],
        security_opt=["no-new-privileges"],
        ipc_mode="shareable",
        cap_add=["SYS_NICE"],
    )
    wait_for(lambda: _health(port), 60, message="sim healthy")
    before = docker_client.api.inspect_container(orig.id)
    out_dir = tmp_path / "restore"
    with structlog.testing.capture_logs() as logs:
        assert cli_snapshot(orig.name, out_dir) == 0
    name = orig.name
    files = [out_dir / f"{name}.inspect.json", out_dir / f"{name}.env", out_dir / f"{name}.profile.yaml"]
    assert all(_mode(f) == 0o600 for f in files)
    assert _mode(out_dir) == 0o700
    env_lines = (out_dir / f"{name}.env").read_text(encoding="utf-8").split("\n")
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" not in env_lines  # image's own
    assert f"LONG={'x' * 100_000}" in env_lines
    orig.remove(force=True)
    with structlog.testing.capture_logs() as logs2:
        assert cli_restore(name, out_dir, replace=False, ctx=_ctx(tmp_path)) == 0
    after = docker_client.api.inspect_container(name)
    _compare(before, after)
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert after["HostConfig"]["ShmSize"] == 256 * 1024 * 1024
    assert after["HostConfig"]["IpcMode"] == "shareable"
    out = capsys.readouterr()
    assert "API key: enforced" in out.out
    assert SECRET not in out.out + out.err + repr(logs) + repr(logs2)
    assert HOSTILE["UNICODE"] not in out.out + out.err


@pytest.mark.docker
def test_hostile_env_round_trips_exactly(
    docker_client: docker.DockerClient,
    resources: Resources,
    base_image: str,
    adapter: DockerAdapter,
    tmp_path: Path,
) -> None:
    """Spaces, '=', quotes, '#', unicode, empty, 100 KB values: profile env == container env."""
    name = resources.name("hostile")
    c = docker_client.containers.create(
        base_image,
        ["sleep", "600"],
        name=name,
        environment=HOSTILE,
        labels=resources.labels,
    )
    paths = snapshot(adapter, name, tmp_path)
    prof = load_profile(paths.profile)
    assert prof.container.env_dict() == HOSTILE
    before = docker_client.api.inspect_container(name)
    c.remove(force=True)
    adapter.create(prof.container)
    after = docker_client.api.inspect_container(name)
    assert set(after["Config"]["Env"]) == set(before["Config"]["Env"])


@pytest.mark.docker
def test_created_container_round_trips_bind_modes_stop_timeout_random_port(
    docker_client: docker.DockerClient,
    resources: Resources,
    base_image: str,
    adapter: DockerAdapter,
    tmp_path: Path,
) -> None:
    """`-v a:b`, `-v a:b:rw`, `:ro`, no --stop-timeout, `-p 8000` (random): recreated inspect is identical."""
    name = resources.name("modes")
    (tmp_path / "src").mkdir()
    src = str(tmp_path / "src")
    hc = docker_client.api.create_host_config(
        binds=[f"{src}:/plain", f"{src}:/rw:rw", f"{src}:/ro:ro", f"{src}:/shared:rw,rshared"],
        port_bindings={8000: None, 9000: ("127.0.0.1",)},  # -p 8000 and -p 127.0.0.1::9000
    )
    docker_client.api.create_container(
        base_image,
        ["sleep", "600"],
        name=name,
        labels=resources.labels,
        ports=[8000, 9000],
        host_config=hc,
    )
    before = docker_client.api.inspect_container(name)
    assert before["Config"].get("StopTimeout") is None
    paths = snapshot(adapter, name, tmp_path / "snap")
    assert any("random host port" in w for w in paths.warnings)
    prof = load_profile(paths.profile)
    docker_client.api.remove_container(name, force=True)
    adapter.create(prof.container)
    after = docker_client.api.inspect_container(name)
    _compare(before, after)
    assert after["HostConfig"]["PortBindings"]["8000/tcp"] == [{"HostIp": "", "HostPort": ""}]


def test_cli_snapshot_and_restore_say_why_they_fail(
    resources: Resources, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing `snapshot` / `restore` prints the reason on stderr, not just exit code 1."""
    missing = resources.name("absent")
    assert cli_snapshot(missing, tmp_path) == 1
    err = capsys.readouterr().err
    assert missing in err
    assert "snapshot" in err
    assert cli_restore(missing, tmp_path) == 1
    err = capsys.readouterr().err
    assert f"no snapshot of {missing}" in err


@pytest.mark.docker
def test_newline_in_env_is_refused_and_nothing_written(
    docker_client: docker.DockerClient,
    resources: Resources,
    base_image: str,
    adapter: DockerAdapter,
    tmp_path: Path,
) -> None:
    """A value with a newline: SnapshotError naming the variable (not the value); no file is left."""
    docker_client.containers.create(
        base_image,
        ["sleep", "600"],
        name=(name := resources.name("newline")),
        environment={"MULTILINE_KEY": "-----BEGIN\nsecret-body"},
        labels=resources.labels,
    )
    with pytest.raises(SnapshotError, match="MULTILINE_KEY") as exc:
        snapshot(adapter, name, tmp_path)
    assert "secret-body" not in str(exc.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.docker
def test_restore_refuses_running_unless_replace_and_detects_lost_key(
    docker_client: docker.DockerClient,
    resources: Resources,
    sim_image: str,
    adapter: DockerAdapter,
    tmp_path: Path,
) -> None:
    """Running: refused, then replaced; env file without the key: restore fails loudly, stopped."""
    port = free_port()
    c = _sim(docker_client, resources, "lost", {"VLLM_API_KEY": SECRET, "OTHER": "1"}, port)
    wait_for(lambda: _health(port), 60, message="sim healthy")
    paths = snapshot(adapter, c.name, tmp_path)
    with pytest.raises(SnapshotError, match="--replace"):
        restore(adapter, c.name, tmp_path, _ctx(tmp_path))
    res = restore(adapter, c.name, tmp_path, _ctx(tmp_path), replace=True, wait_s=60)
    assert res.replaced
    assert res.auth == "enforced"
    assert res.base_url == f"http://127.0.0.1:{port}"
    # lose the key, as a hand-picked env list once did
    kept = [
        ln for ln in paths.env.read_text(encoding="utf-8").split("\n") if not ln.startswith("VLLM_API_KEY=")
    ]
    fd = os.open(paths.env, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("\n".join(kept))
    prof_text = paths.profile.read_text(encoding="utf-8").replace("api_key:\n  env: VLLM_API_KEY\n", "")
    fd = os.open(paths.profile, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(prof_text)
    with pytest.raises(SnapshotError, match="without a key"):
        restore(adapter, c.name, tmp_path, _ctx(tmp_path), replace=True, wait_s=60)
    # the snapshot's inspect still shows the key: the open server is stopped, not left on the LAN
    wait_for(
        lambda: not docker_client.api.inspect_container(c.name)["State"]["Running"], 30, message="stopped"
    )


@pytest.mark.docker
def test_round_trip_host_network(
    docker_client: docker.DockerClient,
    resources: Resources,
    sim_image: str,
    adapter: DockerAdapter,
    tmp_path: Path,
) -> None:
    """--network host: restore reaches the server at 127.0.0.1:<--port arg>; the key is still enforced."""
    port = free_port()
    c = docker_client.containers.run(
        sim_image,
        ["--served-model-name", "host-model", "--port", str(port), "--api-key", SECRET],
        name=resources.name("hostnet"),
        labels=resources.labels,
        network_mode="host",
        detach=True,
    )
    wait_for(lambda: _health(port), 60, message="sim healthy on the host network")
    before = docker_client.api.inspect_container(str(c.id))
    name = str(before["Name"]).lstrip("/")
    snapshot(adapter, name, tmp_path)
    c.remove(force=True)
    res = restore(adapter, name, tmp_path, _ctx(tmp_path), wait_s=60)
    assert res.base_url == f"http://127.0.0.1:{port}"
    assert res.auth == "enforced"
    _compare(before, docker_client.api.inspect_container(name))


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.real_vllm
def test_round_trip_real_vllm(
    docker_client: docker.DockerClient,
    resources: Resources,
    base_image: str,
    real_vllm_paths: tuple[Path, Path],
    adapter: DockerAdapter,
    tmp_path: Path,
) -> None:
    """Real vLLM CPU server: snapshot -> remove -> restore gives the same config, healthy, key enforced."""
    from tools.realvllm import RealVllmPaths, engine_env, server_argv, volumes

    paths = RealVllmPaths(*real_vllm_paths)
    port = free_port()
    c = docker_client.containers.run(
        base_image,
        server_argv(paths.venv),
        name=resources.name("real-snap"),
        labels=resources.labels,
        shm_size="1g",
        ports={"8000/tcp": ("127.0.0.1", port)},
        environment=engine_env({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_API_KEY": SECRET}),
        volumes=volumes(paths, fork=True),
        detach=True,
    )
    before = docker_client.api.inspect_container(str(c.id))
    name = str(before["Name"]).lstrip("/")
    snapshot(adapter, name, tmp_path)
    until_reaped(lambda: c.remove(force=True))
    res = restore(adapter, name, tmp_path, _ctx(tmp_path), wait_s=240)
    assert res.auth == "enforced"
    assert res.base_url == f"http://127.0.0.1:{port}"
    _compare(before, docker_client.api.inspect_container(name))


def test_supervisorctl_snapshot_and_restore_round_trip(
    tmp_path: Path,
    resources: Resources,
    sim_image: str,
) -> None:
    """The real `supervisorctl snapshot` / `restore` commands (subprocesses) round-trip a container, through
    the daemon config's restore_dir."""
    import subprocess
    import sys

    key = "cli-SECRET-4b1d key=#'\""
    port = free_port()
    name = _sim(resources.client, resources, "cli", {"VLLM_API_KEY": key, "SPACES": "a b  c"}, port).name
    wait_for(lambda: _health(port), 30, message="sim ready")
    before = resources.client.api.inspect_container(name)
    out = tmp_path / "snap"

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "supervisor.cli", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    config = tmp_path / "daemon.yaml"  # its restore_dir is where snapshot writes and restore reads
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\nrestore_dir: {out}\nprofiles: []\n"
        f"host: {{drop_caches: false, load_lock_path: {tmp_path / 'load.lock'}}}\n",
        encoding="utf-8",
    )
    snap = ctl("snapshot", name, "--config", str(config))
    assert snap.returncode == 0, snap.stderr
    assert _mode(out / f"{name}.env") == 0o600
    refused = ctl("restore", name, "--from", str(out))  # it is still running: refuse to clobber it
    assert refused.returncode != 0
    resources.client.containers.get(name).remove(force=True)
    restored = ctl("restore", name, "--config", str(config))
    assert restored.returncode == 0, restored.stderr
    after = resources.client.api.inspect_container(name)
    assert set(after["Config"]["Env"]) == set(before["Config"]["Env"])
    assert after["Config"]["Cmd"] == before["Config"]["Cmd"]
    assert after["HostConfig"]["PortBindings"] == before["HostConfig"]["PortBindings"]
    for proc in (snap, refused, restored):
        assert key not in proc.stdout + proc.stderr

"""``supervisorctl init`` / ``uninit`` under a real systemd (PID 1 of a container), on a hand-run simulator.

The box is tests/test_systemd_real.py's (the systemd image, the Debian-python venv, the host's Docker
socket and network), but nothing is installed in it beforehand: the model container is started by a
hand-typed ``docker run`` (``--restart unless-stopped``, ``--api-key`` on its command line, hostile env
values, a secret ``HF_TOKEN``), then ``supervisorctl init`` runs inside the box as root with a local
generic receiver as the alert channel and writes /etc/vllm-supervisor (a bind mount of a temporary
directory, so the test reads the files) and the units. The tests run in file order on one box.
Select with ``-m systemd_real``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from supervisor.adapters.docker.adapter import DockerAdapter
from tests.harness import NAME_PREFIX, TEST_LABEL, WebhookReceiver, free_port, wait_for, webhook_receiver
from tools.images import ensure_systemd_image
from tools.systemd_env import ensure_venv

pytestmark = [pytest.mark.systemd_real, pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
ETC = "/etc/vllm-supervisor"
UNIT = "vllm-supervisor.service"
KEY = "sk-init-" + uuid.uuid4().hex
HF_TOKEN = "hf_" + uuid.uuid4().hex + "'\"$;`x`"
#: Values a shell, YAML or an env-file parser could mangle (non-secret names: they stay in the profile).
HOSTILE = {
    "A_QUOTES": "he said \"hi\" and 'bye' $HOME `id` \\n ;|&",
    "B_SPACES": "  leading and trailing  ",
    "C_UNICODE": "模型 ✓ ünïcode",
    "D_HASH": "#not a comment",
    "E_EQUALS": "a=b=c",
    "F_YAML": "yes",
}


@dataclass
class Box:
    """The systemd container, the model container and the receiver."""

    name: str
    model: str
    port: int
    receiver: WebhookReceiver
    etc: Path

    def sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["docker", "exec", self.name, *argv], capture_output=True, text=True, timeout=300, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``supervisorctl ARGS`` run inside the box as root, from this checkout."""
        venv = ensure_venv()
        env = ["env", f"PYTHONPATH={ROOT}", "PYTHONDONTWRITEBYTECODE=1"]
        return self.sh(*env, f"{venv}/bin/python", "-m", "supervisor.cli.main", *args, check=check)

    def show(self, prop: str) -> str:
        return self.sh("systemctl", "show", "-p", prop, "--value", UNIT).stdout.strip()

    def profile(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.ctl("status", "--json", check=False).stdout)
            return dict(data["profiles"][0])
        except (ValueError, KeyError, IndexError):
            return None

    def wait_running(self, timeout: float = 180) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            p = self.profile()
            return p if p is not None and p.get("state") == "RUNNING" else None

        return wait_for(running, timeout, 1.0, "profile RUNNING in the box")

    def inspect(self, ref: str | None = None) -> dict[str, Any]:
        client = docker.from_env(timeout=60)
        try:
            return dict(client.api.inspect_container(ref or self.model))
        finally:
            client.close()

    def tree(self) -> dict[str, tuple[str, int, int]]:
        """Every file under the config dir and the unit dir: (content, mode, mtime_ns)."""
        out: dict[str, tuple[str, int, int]] = {}
        for p in sorted(self.etc.rglob("*")):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (p.read_text(encoding="utf-8"), st.st_mode & 0o777, st.st_mtime_ns)
        ls = "ls -l --time-style=+%s.%N /etc/systemd/system/vllm-* 2>&1"
        listing = self.sh("sh", "-c", ls, check=False)
        out["units"] = (listing.stdout, 0, 0)
        return out


def _http(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture(scope="module")
def box(sim_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """A booted systemd box with nothing installed, and a hand-run simulator with its own restart policy."""
    image = ensure_systemd_image()
    venv = ensure_venv()
    test_id = uuid.uuid4().hex[:8]
    name = f"{NAME_PREFIX}init-box-{test_id}"
    model = f"{NAME_PREFIX}init-model-{test_id}"
    etc = tmp_path_factory.mktemp("etc")
    port = free_port()
    client = docker.from_env(timeout=60)
    with webhook_receiver() as receiver:
        b = Box(name, model, port, receiver, etc)
        try:
            env = [x for k, v in {**HOSTILE, "HF_TOKEN": HF_TOKEN}.items() for x in ("-e", f"{k}={v}")]
            subprocess.run(
                ["docker", "run", "-d", "--name", model, "--label", f"{TEST_LABEL}={test_id}",
                 "--restart", "unless-stopped", "-p", f"127.0.0.1:{port}:8000", *env,
                 "-e", "VSIM_LOAD_SECONDS=1", sim_image,
                 "--model", "/models/sim", "--served-model-name", "sim", "--api-key", KEY],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            subprocess.run(
                ["docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={test_id}",
                 "--network", "host", "-e", "container=docker",
                 "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                 "-v", "/var/run/docker.sock:/var/run/docker.sock",
                 "-v", f"{ROOT}:{ROOT}:ro", "-v", f"{venv}:{venv}:ro", "-v", f"{etc}:{ETC}", image],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            up = ("running", "degraded")
            booted = lambda: b.sh("systemctl", "is-system-running", check=False).stdout.strip() in up  # noqa: E731
            wait_for(booted, 60, 0.5)
            wait_for(lambda: _http(f"http://127.0.0.1:{port}/health", None) == 200, 60, 0.5, "sim healthy")
            yield b
        finally:
            for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={test_id}"}):
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True, v=True)
            client.close()


def _init(box: Box, *extra: str) -> subprocess.CompletedProcess[str]:
    alert = f"{box.receiver.url}/alert"
    return box.ctl("init", box.model, "--generic", alert, "--wait", "180", *extra, check=False)


def test_dry_run_changes_nothing(box: Box) -> None:
    """init --dry-run prints every file and command, writes nothing, leaves the restart policy alone."""
    before = box.tree()
    proc = _init(box, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for path in (f"{ETC}/daemon.yaml", f"{ETC}/profiles/{box.model}.yaml", f"/etc/systemd/system/{UNIT}"):
        assert path in out
    assert "docker update --restart no" in out
    assert "systemctl enable --now" in out
    assert "box: other" in out
    assert KEY not in out
    assert HF_TOKEN not in out
    assert box.tree() == before
    assert box.inspect()["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    status = DockerAdapter().status(box.model)  # what the daemon's adoption sees (and warns about)
    assert status is not None
    assert status.restart_policy == "unless-stopped"


def test_init_adopts_the_same_container(box: Box) -> None:
    """init: the unit is active, the same container RUNNING, restart policy no, auth on, the test alert in."""
    cid = box.inspect()["Id"]
    proc = _init(box)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert KEY not in proc.stdout + proc.stderr
    assert HF_TOKEN not in proc.stdout + proc.stderr
    assert box.show("ActiveState") == "active"
    assert box.sh("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    st = box.wait_running()
    assert st["container_id"] == cid
    assert box.inspect()["HostConfig"]["RestartPolicy"]["Name"] == "no"
    base = f"http://127.0.0.1:{box.port}/v1/models"
    assert _http(base, None) == 401
    assert _http(base, KEY) == 200
    titles = [r.json().get("title") for r in box.receiver.received() if r.body]
    assert "test alert" in titles
    assert "generic: HTTP 200" in proc.stdout  # the test-alert result line
    # secrets only in 0600 files, never in the profile or the daemon config
    profile = box.etc / "profiles" / f"{box.model}.yaml"
    for path in (profile, box.etc / "daemon.yaml"):
        text = path.read_text(encoding="utf-8")
        assert KEY not in text
        assert HF_TOKEN not in text
        assert box.receiver.url not in text
    key_file = box.etc / "profiles" / "secrets" / f"{box.model}.key"
    assert key_file.read_text(encoding="utf-8").strip() == KEY
    assert key_file.stat().st_mode & 0o777 == 0o600
    env_file = box.etc / "profiles" / f"{box.model}.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert f"HF_TOKEN={HF_TOKEN}\n" in env_file.read_text(encoding="utf-8")
    doc = yaml.safe_load(profile.read_text(encoding="utf-8"))
    assert doc["container"]["env"] == HOSTILE | {"VSIM_LOAD_SECONDS": "1"}
    assert doc["api_key"] == {"file": f"secrets/{box.model}.key", "inject_arg": "--api-key"}
    assert box.ctl("diff", box.model, check=False).returncode == 0  # the running container matches


def test_second_init_changes_nothing(box: Box) -> None:
    """A second init: same files (content, mode, mtime), same daemon process, same container."""
    before, pid, cid = box.tree(), box.show("MainPID"), box.inspect()["Id"]
    proc = _init(box)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing changed" in proc.stdout
    assert box.tree() == before
    assert box.show("MainPID") == pid
    assert box.inspect()["Id"] == cid


def test_docker_kill_is_recovered_into_an_identical_container(box: Box) -> None:
    """docker kill: the daemon (not Docker) recreates it with the same image, command, env and ports."""
    old = box.inspect()
    subprocess.run(["docker", "kill", old["Id"]], check=True, capture_output=True, timeout=60)

    def recreated() -> dict[str, Any] | None:
        p = box.profile()
        ok = p is not None and p.get("state") == "RUNNING" and p.get("container_id") not in (None, old["Id"])
        return p if ok else None

    st = wait_for(recreated, 180, 1.0, "a new container RUNNING")
    new = box.inspect(str(st["container_id"]))
    assert new["Name"] == old["Name"]
    assert new["Config"]["Image"] == old["Config"]["Image"]
    assert new["Config"]["Cmd"] == old["Config"]["Cmd"]  # the key is back after --api-key
    assert sorted(new["Config"]["Env"]) == sorted(old["Config"]["Env"])
    assert new["HostConfig"]["PortBindings"] == old["HostConfig"]["PortBindings"]
    assert new["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert _http(f"http://127.0.0.1:{box.port}/v1/models", KEY) == 200
    assert box.ctl("diff", box.model, check=False).returncode == 0


def test_uninit_leaves_the_model_running(box: Box) -> None:
    """uninit: the unit is gone, the config kept (no flag), the model container still running."""
    cid = box.inspect()["Id"]
    proc = box.ctl("uninit", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert box.sh("test", "-e", f"/etc/systemd/system/{UNIT}", check=False).returncode != 0
    assert box.show("ActiveState") == "inactive"
    assert (box.etc / "daemon.yaml").exists()
    info = box.inspect()
    assert info["Id"] == cid
    assert info["State"]["Running"]

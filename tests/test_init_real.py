"""``supervisorctl init`` / ``uninit`` under a real systemd (PID 1 of a container), on hand-run simulators
started like field report 000's ``docker run`` (issue 38).

The box is tests/test_systemd_real.py's (the systemd image, the Debian-python venv, the host's Docker
socket and network) with ``CAP_SYS_ADMIN``, so systemd **enforces the unit's namespacing** (ProtectSystem=,
PrivateTmp=, ReadWritePaths=; without it systemd skips them). Nothing is installed beforehand: the model
container is started by a hand-typed ``docker run`` with ``--restart unless-stopped``, ``--api-key`` on
its command line, a bind mount of a file under ``/tmp`` (the seed's ``/tmp/fixed_config.json``), a proxy
URL with a password and a secret ``HF_TOKEN`` in its env, and hostile env values. Then ``supervisorctl
init`` runs inside the box as root (the alert URL from a 0600 file, never argv), the configuration
directory is a host directory mounted at the same path in the box (``--etc``: the bind sources init
copies there must exist for the host's Docker too). The tests run in file order on one box.
Select with ``-m systemd_real``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
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
UNIT = "vllm-supervisor.service"
KEY = "sk-init-" + uuid.uuid4().hex
HF_TOKEN = "hf_" + uuid.uuid4().hex + "'\"$;`x`"
PROXY_PASSWORD = "pw" + uuid.uuid4().hex[:12]
PROXY = f"http://user:{PROXY_PASSWORD}@proxy.invalid:3128"
FIXED_JSON = '{"model_type": "qwen4_exp"}\n'
#: The bash suite's cron line (the seeds' supervise.sh): init disables it, uninit gives it back.
SUITE_CRON = "*/1 * * * * root /root/suite/supervise.sh --once"
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
    """The systemd container, the model containers and the receiver."""

    name: str
    model: str
    second: str
    port: int
    port2: int
    receiver: WebhookReceiver
    etc: Path  # the same path on the host and in the box
    tmp_file: Path  # under /tmp, the same path on the host and in the box

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
        env = ["env", f"PYTHONPATH={ROOT}", "PYTHONDONTWRITEBYTECODE=1", "LANG=zh_TW.UTF-8"]
        return self.sh(*env, f"{venv}/bin/python", "-m", "supervisor.cli.main", *args, check=check)

    def show(self, prop: str) -> str:
        return self.sh("systemctl", "show", "-p", prop, "--value", UNIT).stdout.strip()

    def profiles(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.ctl("status", "--json", check=False).stdout)
            return {str(p["name"]): dict(p) for p in data["profiles"]}
        except (ValueError, KeyError, TypeError):
            return {}

    def wait_running(self, name: str, timeout: float = 180, other_than: str | None = None) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            p = self.profiles().get(name)
            if p is None or p.get("state") != "RUNNING" or not p.get("observed", True):
                return None
            return p if p.get("container_id") != other_than else None

        return wait_for(running, timeout, 1.0, f"{name} RUNNING in the box")

    def inspect(self, ref: str) -> dict[str, Any]:
        client = docker.from_env(timeout=60)
        try:
            return dict(client.api.inspect_container(ref))
        finally:
            client.close()

    def tree(self) -> dict[str, tuple[str, int, int]]:
        """Every file under the config dir and the unit dir: (content, mode, mtime_ns)."""
        out: dict[str, tuple[str, int, int]] = {}
        for p in sorted(self.etc.rglob("*")):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (p.read_bytes().decode("utf-8", "replace"), st.st_mode & 0o777, st.st_mtime_ns)
        ls = "ls -l --time-style=+%s.%N /etc/systemd/system/vllm-* 2>&1"
        out["units"] = (self.sh("sh", "-c", ls, check=False).stdout, 0, 0)
        return out

    def in_daemon_ns(self, script: str) -> int:
        """Run ``script`` with ``R`` = the daemon's root as its mount namespace sees it (/proc/PID/root)."""
        pid = self.show("MainPID")
        return self.sh("sh", "-c", f"R=/proc/{pid}/root; {script}", check=False).returncode


def _http(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _cmdlines() -> str:
    """Every process's command line on this host (the box's and the containers' processes included)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError):
                out.append((p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
    return "\n".join(out)


def _run_sim(name: str, test_id: str, port: int, image: str, *extra: str) -> None:
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={test_id}",
         "--restart", "unless-stopped", "-p", f"127.0.0.1:{port}:8000", *extra,
         "-e", "VSIM_LOAD_SECONDS=1", image,
         "--model", "/models/sim", "--served-model-name", "sim", "--api-key", KEY],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def box(sim_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """A booted systemd box (namespacing enforced) with nothing installed, and a hand-run simulator."""
    image = ensure_systemd_image()
    venv = ensure_venv()
    test_id = uuid.uuid4().hex[:8]
    name = f"{NAME_PREFIX}init-box-{test_id}"
    model = f"{NAME_PREFIX}init-model-{test_id}"
    second = f"{NAME_PREFIX}init-second-{test_id}"
    host_dir = Path(f"/var/lib/{NAME_PREFIX}init-{test_id}")  # not under /tmp nor /etc: shared with the host
    etc = host_dir / "etc"
    tmp_file = Path(f"/tmp/{NAME_PREFIX}init-{test_id}-fixed_config.json")
    port, port2 = free_port(), free_port()
    client = docker.from_env(timeout=60)
    with webhook_receiver() as receiver:
        b = Box(name, model, second, port, port2, receiver, etc, tmp_file)
        try:
            etc.mkdir(parents=True)
            tmp_file.write_text(FIXED_JSON, encoding="utf-8")
            env = {**HOSTILE, "HF_TOKEN": HF_TOKEN, "HTTPS_PROXY": PROXY}
            _run_sim(
                model, test_id, port, sim_image,
                *[x for k, v in env.items() for x in ("-e", f"{k}={v}")],
                "-v", f"{tmp_file}:/models/config.json:ro",
            )  # fmt: skip
            subprocess.run(
                ["docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={test_id}",
                 "--network", "host", "-e", "container=docker", "--cap-add", "SYS_ADMIN",
                 "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                 "-v", "/var/run/docker.sock:/var/run/docker.sock",
                 "-v", f"{ROOT}:{ROOT}:ro", "-v", f"{venv}:{venv}:ro", "-v", f"{host_dir}:{host_dir}",
                 "-v", f"{tmp_file}:{tmp_file}:ro", image],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            up = ("running", "degraded")
            booted = lambda: b.sh("systemctl", "is-system-running", check=False).stdout.strip() in up  # noqa: E731
            wait_for(booted, 60, 0.5)
            wait_for(lambda: _http(f"http://127.0.0.1:{port}/health", None) == 200, 60, 0.5, "sim healthy")
            b.sh("sh", "-c", f"umask 077; printf '%s\\n' '{receiver.url}/alert' > /root/alert.url")
            b.sh("sh", "-c", f"printf '%s\\n' '{SUITE_CRON}' > /etc/cron.d/qwen-suite")
            yield b
        finally:
            for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={test_id}"}):
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True, v=True)
            client.close()
            shutil.rmtree(host_dir, ignore_errors=True)
            tmp_file.unlink(missing_ok=True)


def _init(box: Box, container: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return box.ctl(
        "init", container, "--etc", str(box.etc), "--generic", "/root/alert.url", "--wait", "180", *extra,
        check=False,
    )  # fmt: skip


def _copy(box: Box) -> Path:
    """Where init copies the /tmp bind source (the first one under /tmp: index 0)."""
    return box.etc / "profiles" / f"{box.model}.files" / f"0-{box.tmp_file.name}"


def _no_secret_in_readable_files(box: Box) -> None:
    for path in box.etc.rglob("*"):
        if path.is_file() and path.stat().st_mode & 0o044:
            text = path.read_bytes().decode("utf-8", "replace")
            for secret in (KEY, HF_TOKEN, PROXY_PASSWORD, box.receiver.url):
                assert secret not in text, (path, oct(path.stat().st_mode))


def test_dry_run_changes_nothing_and_prints_no_secret(box: Box) -> None:
    """init --dry-run prints every file and command, writes nothing, leaves the policy alone; no key, no
    proxy password, no --api-key planned; the /tmp source is planned into the config directory."""
    before = box.tree()
    proc = _init(box, box.model, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    for path in (
        f"{box.etc}/daemon.yaml",
        f"{box.etc}/profiles/{box.model}.yaml",
        f"/etc/systemd/system/{UNIT}",
    ):
        assert path in out
    assert "docker update --restart no" in out
    assert "box: other" in out
    for secret in (KEY, HF_TOKEN, PROXY_PASSWORD):
        assert secret not in out
    assert "inject_arg" not in out
    assert f"{box.model}.files/0-" in out
    assert "disable the bash supervisor suite: cron /etc/cron.d/qwen-suite" in out
    assert box.tree() == before
    assert box.inspect(box.model)["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    status = DockerAdapter().status(box.model)
    assert status is not None
    assert status.restart_policy == "unless-stopped"


def test_init_adopts_the_same_container_with_maintenance_and_no_readable_secret(box: Box) -> None:
    """init: the unit active, the same container RUNNING, restart policy no, maintenance on, alerts in
    zh-TW (from LANG), the test alert in; no secret in any group/world-readable file or in the output."""
    cid = box.inspect(box.model)["Id"]
    proc = _init(box, box.model)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for secret in (KEY, HF_TOKEN, PROXY_PASSWORD):
        assert secret not in out
    assert box.show("ActiveState") == "active"
    assert box.sh("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    st = box.wait_running(box.model)
    assert st["container_id"] == cid
    assert st["next_maintenance"] is not None  # the weekly restart is scheduled
    assert box.inspect(box.model)["HostConfig"]["RestartPolicy"]["Name"] == "no"
    config = yaml.safe_load((box.etc / "daemon.yaml").read_text(encoding="utf-8"))
    assert config["maintenance"] == {"enabled": True, "cron": "0 4 * * 0", "drain_timeout_s": 600}
    assert config["alerts"]["language"] == "zh-TW"
    titles = [r.json().get("title") for r in box.receiver.received() if r.body]
    assert "test alert" in titles
    assert "docker rm -f" in out  # the bash suite was found and disabled, saying why
    assert (
        box.sh("cat", "/etc/cron.d/qwen-suite").stdout == f"#disabled-by-vllm-supervisor-init# {SUITE_CRON}\n"
    )
    _no_secret_in_readable_files(box)
    key_file = box.etc / "profiles" / "secrets" / f"{box.model}.key"
    assert key_file.read_text(encoding="utf-8").strip() == KEY
    assert key_file.stat().st_mode & 0o777 == 0o600
    env_file = box.etc / "profiles" / f"{box.model}.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    env_text = env_file.read_text(encoding="utf-8")
    assert f"HF_TOKEN={HF_TOKEN}\n" in env_text
    assert f"HTTPS_PROXY={PROXY}\n" in env_text
    doc = yaml.safe_load((box.etc / "profiles" / f"{box.model}.yaml").read_text(encoding="utf-8"))
    assert doc["container"]["env"] == HOSTILE | {"VSIM_LOAD_SECONDS": "1"}
    assert doc["api_key"] == {"file": f"secrets/{box.model}.key", "inject_env": "VLLM_API_KEY"}
    assert "--api-key" not in doc["container"]["command"]
    copy = _copy(box)
    [mount] = [m for m in doc["container"]["mounts"] if m["target"] == "/models/config.json"]
    assert (mount["source"], mount["read_only"]) == (str(copy), True)
    assert copy.read_text(encoding="utf-8") == FIXED_JSON


def test_the_unit_namespacing_leaves_tmp_and_rollback_targets_to_the_daemon(box: Box) -> None:
    """Under the shipped unit (namespacing enforced here): the daemon sees the host's /tmp (a /tmp-mounted
    profile's preflight finds its file), can write /opt and /home (a patch rollback restores files there)
    and its profiles directory, and cannot write /usr or /etc/systemd (the hardening is on)."""
    assert box.in_daemon_ns(f"test -r $R{box.tmp_file}") == 0
    for where in ("/opt", "/home", str(box.etc / "profiles")):
        probe = f"{where}/.vsup-rollback-probe"
        assert box.in_daemon_ns(f"mkdir -p $R{where} && touch $R{probe} && rm $R{probe}") == 0, where
    assert box.in_daemon_ns("touch $R/usr/.vsup-probe") != 0
    assert box.in_daemon_ns("touch $R/etc/systemd/.vsup-probe") != 0


def test_second_init_changes_nothing(box: Box) -> None:
    """The same init again: same files (content, mode, mtime), same daemon process, same container."""
    before, pid, cid = box.tree(), box.show("MainPID"), box.inspect(box.model)["Id"]
    proc = _init(box, box.model)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing changed" in proc.stdout
    assert box.tree() == before
    assert box.show("MainPID") == pid
    assert box.inspect(box.model)["Id"] == cid


def test_docker_kill_is_recovered_with_the_key_in_no_command_line(box: Box) -> None:
    """docker kill: the daemon (not Docker) recreates it from the profile: the /tmp file from its copy, the
    key in the environment (no process on the host shows it in /proc/PID/cmdline), auth still on."""
    old = box.inspect(box.model)
    assert KEY in _cmdlines()  # the hand-started container had it on its command line
    subprocess.run(["docker", "kill", old["Id"]], check=True, capture_output=True, timeout=60)
    st = box.wait_running(box.model, other_than=old["Id"])
    new = box.inspect(str(st["container_id"]))
    assert new["Name"] == old["Name"]
    assert new["Config"]["Image"] == old["Config"]["Image"]
    assert KEY not in new["Config"]["Cmd"]
    assert f"VLLM_API_KEY={KEY}" in new["Config"]["Env"]
    assert f"HTTPS_PROXY={PROXY}" in new["Config"]["Env"]
    sources = [m["Source"] for m in new["Mounts"] if m["Destination"] == "/models/config.json"]
    assert sources == [str(_copy(box))]
    assert new["HostConfig"]["PortBindings"] == old["HostConfig"]["PortBindings"]
    assert new["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert KEY not in _cmdlines()
    base = f"http://127.0.0.1:{box.port}/v1/models"
    assert _http(base, None) == 401
    assert _http(base, KEY) == 200
    assert box.ctl("diff", box.model, check=False).returncode == 0  # the new container is the profile


def test_a_second_init_adds_a_profile(box: Box, sim_image: str) -> None:
    """A second model on the same box: init adds its profile; both are supervised."""
    test_id = box.name.rsplit("-", 1)[1]
    _run_sim(box.second, test_id, box.port2, sim_image)
    wait_for(
        lambda: _http(f"http://127.0.0.1:{box.port2}/health", None) == 200, 60, 0.5, "second sim healthy"
    )
    cid = box.inspect(box.second)["Id"]
    proc = _init(box, box.second)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load((box.etc / "daemon.yaml").read_text(encoding="utf-8"))
    assert config["profiles"] == [f"profiles/{box.model}.yaml", f"profiles/{box.second}.yaml"]
    assert box.wait_running(box.second)["container_id"] == cid
    assert box.wait_running(box.model)["state"] == "RUNNING"
    _no_secret_in_readable_files(box)


def test_uninit_of_one_profile_leaves_the_other_supervised(box: Box) -> None:
    """uninit NAME: that profile is gone from the daemon (its container keeps running), the other is
    still supervised: a docker kill of it is recovered."""
    first = box.inspect(box.model)["Id"]
    proc = box.ctl("uninit", box.model, "--etc", str(box.etc), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert box.show("ActiveState") == "active"
    wait_for(lambda: box.model not in box.profiles(), 60, 1.0, "the first profile gone")
    assert box.inspect(box.model)["State"]["Running"]
    assert box.inspect(box.model)["Id"] == first
    old = box.inspect(box.second)["Id"]
    subprocess.run(["docker", "kill", old], check=True, capture_output=True, timeout=60)
    assert box.wait_running(box.second, other_than=old)["state"] == "RUNNING"


def test_uninit_leaves_the_model_running(box: Box) -> None:
    """uninit: the unit is gone, the config kept (no flag), the model container still running."""
    cid = box.inspect(box.second)["Id"]
    proc = box.ctl("uninit", "--etc", str(box.etc), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert box.sh("test", "-e", f"/etc/systemd/system/{UNIT}", check=False).returncode != 0
    assert box.show("ActiveState") == "inactive"
    assert (box.etc / "daemon.yaml").exists()
    assert box.sh("cat", "/etc/cron.d/qwen-suite").stdout == SUITE_CRON + "\n"  # the suite given back
    info = box.inspect(box.second)
    assert info["Id"] == cid
    assert info["State"]["Running"]

"""The box of tests/test_init_real.py: systemd as PID 1 in a container, the package installed in it from the
wheel as docs/install.md says, and hand-run simulators on the host's Docker started like field report 000's.

The box is tests/test_systemd_real.py's image (systemd, Debian's python3 with python3-venv) on the host's
network and Docker socket, with ``CAP_SYS_ADMIN`` so systemd **enforces the unit's namespacing**
(ProtectSystem=, ReadWritePaths=, ...; without it systemd skips them). Neither the checkout nor any venv of
the host is mounted in it: the wheel is built from this checkout on the host (tools.systemd_env.build_wheel),
and inside the box, as root, ``python3 -m venv /opt/vllm-supervisor/venv`` and that venv's ``pip install``
of the wheel (dependencies from the cached wheelhouse: ``--no-index --find-links``; the box has no package
index). Every command in the box runs from ``/``. Directories the daemon and the host's dockerd must both
see are host directories mounted at the same path in the box: the configuration directory (``--etc``:
the bind sources init copies there), the ``/tmp`` file the model mounts, and the patch files under
``/opt/vsup-test-*`` and ``/home/vsup-test-*`` (a patch rollback writes there).
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

from tests.harness import NAME_PREFIX, TEST_LABEL, WebhookReceiver, free_port, wait_for, webhook_receiver
from tools.images import ensure_systemd_image
from tools.systemd_env import box_exec, build_wheel, ensure_wheelhouse

UNIT = "vllm-supervisor.service"
VENV = "/opt/vllm-supervisor/venv"
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
#: The "patched vLLM files" the model bind-mounts over the simulator's own (same content: it still runs).
SIM_DIR = Path(__file__).resolve().parent.parent / "supervisor" / "sim"
PATCHED = ("simgen.py", "simlog.py")


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
    patches: dict[str, Path]  # simulator file name -> its patch: one under /opt, one under /home

    def sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = box_exec(self.name, argv, timeout=300, workdir="/")
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The installed ``supervisorctl ARGS``, run inside the box as root from ``/``."""
        return self.sh("env", "LANG=zh_TW.UTF-8", f"{VENV}/bin/supervisorctl", *args, check=check)

    def show(self, prop: str) -> str:
        return self.sh("systemctl", "show", "-p", prop, "--value", UNIT).stdout.strip()

    def profiles(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.ctl("status", "--json", check=False).stdout)
            return {str(p["name"]): dict(p) for p in data["profiles"]}
        except (ValueError, KeyError, TypeError):
            return {}

    def wait_status(self, name: str, pred: Any, timeout: float, message: str) -> dict[str, Any]:
        def ok() -> dict[str, Any] | None:
            p = self.profiles().get(name)
            return p if p is not None and pred(p) else None

        return wait_for(ok, timeout, 1.0, f"{name}: {message}")

    def wait_running(self, name: str, timeout: float = 180, other_than: str | None = None) -> dict[str, Any]:
        def running(p: dict[str, Any]) -> bool:
            return bool(p.get("state") == "RUNNING" and p.get("observed", True)) and (
                p.get("container_id") != other_than
            )

        return self.wait_status(name, running, timeout, "RUNNING in the box")

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


def http_status(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def run_sim(name: str, test_id: str, port: int, image: str, *extra: str) -> None:
    """A hand-typed ``docker run`` of the simulator: ``--restart unless-stopped``, ``--api-key`` on argv."""
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={test_id}",
         "--restart", "unless-stopped", "-p", f"127.0.0.1:{port}:8000", *extra,
         "-e", "VSIM_LOAD_SECONDS=1", image,
         "--model", "/models/sim", "--served-model-name", "sim", "--api-key", KEY],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def install_wheel(box: Box, wheel: Path, wheelhouse: Path) -> None:
    """docs/install.md step 2 inside the box, as root, offline (the wheelhouse instead of an index)."""
    box.sh("install", "-d", "-m", "0755", "-o", "root", "-g", "root", "/opt/vllm-supervisor")
    box.sh("python3", "-m", "venv", VENV)
    box.sh(f"{VENV}/bin/pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), str(wheel))


@contextlib.contextmanager
def init_box(sim_image: str) -> Iterator[Box]:
    """A booted box (namespacing enforced) with the wheel installed and nothing configured, and a hand-run
    simulator started like seed 000's; everything removed afterwards."""
    image = ensure_systemd_image()
    wheelhouse = ensure_wheelhouse()
    test_id = uuid.uuid4().hex[:8]
    name = f"{NAME_PREFIX}init-box-{test_id}"
    host_dir = Path(f"/var/lib/{NAME_PREFIX}init-{test_id}")  # not under /tmp nor /etc: shared with the host
    opt_dir, home_dir = Path(f"/opt/{NAME_PREFIX}init-{test_id}"), Path(f"/home/{NAME_PREFIX}init-{test_id}")
    tmp_file = Path(f"/tmp/{NAME_PREFIX}init-{test_id}-fixed_config.json")
    patches = {PATCHED[0]: opt_dir / "patches" / PATCHED[0], PATCHED[1]: home_dir / "patches" / PATCHED[1]}
    client = docker.from_env(timeout=60)
    with webhook_receiver() as receiver:
        b = Box(
            name, f"{NAME_PREFIX}init-model-{test_id}", f"{NAME_PREFIX}init-second-{test_id}", free_port(),
            free_port(), receiver, host_dir / "etc", tmp_file, patches,
        )  # fmt: skip
        try:
            b.etc.mkdir(parents=True)
            wheel = build_wheel(host_dir / "build")
            tmp_file.write_text(FIXED_JSON, encoding="utf-8")
            for sim_name, patch in patches.items():
                patch.parent.mkdir(parents=True)
                shutil.copy(SIM_DIR / sim_name, patch)
            env = {**HOSTILE, "HF_TOKEN": HF_TOKEN, "HTTPS_PROXY": PROXY}
            mounts = [f"{tmp_file}:/models/config.json:ro"]
            mounts += [f"{patch}:/opt/vllm-sim/{sim_name}:ro" for sim_name, patch in patches.items()]
            run_sim(
                b.model, test_id, b.port, sim_image,
                *[x for k, v in env.items() for x in ("-e", f"{k}={v}")],
                *[x for m in mounts for x in ("-v", m)],
            )  # fmt: skip
            shared = [host_dir, opt_dir, home_dir]
            subprocess.run(
                ["docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={test_id}",
                 "--network", "host", "-e", "container=docker", "--cap-add", "SYS_ADMIN",
                 "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                 "-v", "/var/run/docker.sock:/var/run/docker.sock",
                 *[x for d in shared for x in ("-v", f"{d}:{d}")],
                 "-v", f"{wheelhouse}:{wheelhouse}:ro", "-v", f"{tmp_file}:{tmp_file}:ro", image],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            up = ("running", "degraded")
            booted = lambda: b.sh("systemctl", "is-system-running", check=False).stdout.strip() in up  # noqa: E731
            wait_for(booted, 60, 0.5)
            install_wheel(b, wheel, wheelhouse)
            health = f"http://127.0.0.1:{b.port}/health"
            wait_for(lambda: http_status(health, None) == 200, 60, 0.5, "sim healthy")
            b.sh("sh", "-c", f"umask 077; printf '%s\\n' '{receiver.url}/alert' > /root/alert.url")
            b.sh("sh", "-c", f"printf '%s\\n' '{SUITE_CRON}' > /etc/cron.d/qwen-suite")
            yield b
        finally:
            for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={test_id}"}):
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True, v=True)
            client.close()
            for d in (host_dir, opt_dir, home_dir):
                shutil.rmtree(d, ignore_errors=True)
            tmp_file.unlink(missing_ok=True)

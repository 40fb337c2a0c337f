"""The restarters compared by ``bench.compare``, each keeping one model server up.

The server is a :class:`Server`: the simulator (:func:`sim_server`) or the real vLLM CPU build
(bench/compare_real.py). Every tool gets its own container name, 127.0.0.1 port and API key, and the same
image, command, environment and container options.
``up()`` starts it (returns at once), ``down()`` removes every trace (process, container, temp files).

* ``vllm-supervisor``: the real daemon (a subprocess via tests/daemon_harness.py) with the SHIPPED defaults
  except what a shared test box needs (:data:`DAEMON_TEST_BOX_CHANGES`).
* ``docker-on-failure`` / ``docker-unless-stopped``: ``docker run -d --restart POLICY``.
* ``supervisord``: the PyPI ``supervisor`` package in its own venv (its import name and ``supervisorctl``
  clash with ours), running ``docker run --rm`` in the foreground, ``autorestart=true``, other keys default.
* ``docker-healthcheck``: ``--restart unless-stopped`` + a HEALTHCHECK on /health + :class:`Autoheal`.
* ``k8s-liveness``: ``--restart unless-stopped`` + a Kubernetes-style liveness loop with its defaults
  (bench/compare_liveness.py).
* ``systemd``, ``bash-loop``: bench/compare_peers.py (which also builds every tool: ``make_tools``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import docker
import yaml
from docker.errors import DockerException, NotFound

from bench.compare_liveness import Liveness
from bench.compare_server import Server
from tests.daemon_harness import DaemonProc
from tests.harness import TEST_LABEL, free_port

TOOLS = (
    "vllm-supervisor",
    "docker-on-failure",
    "docker-unless-stopped",
    "supervisord",
    "docker-healthcheck",
    "k8s-liveness",
    "systemd",
    "bash-loop",
)
#: Not in the default run: the daemon with ``backoff.initial_s: 1`` (what a quick first retry would give).
VARIANTS = ("vllm-supervisor-backoff1",)
CACHE = Path(os.environ.get("VSUP_CACHE_DIR", "/var/cache/vllm-supervisor"))
SUPERVISORD_VENV = CACHE / "supervisord-venv"
SUPERVISORD_VERSION = "4.3.0"
#: What the daemon's config changes from the shipped defaults, and why (printed with the results).
DAEMON_TEST_BOX_CHANGES = {
    "state_dir, socket_path, restore_dir": "a private temp dir per trial (other engineers' daemons run here)",
    "host.load_lock_path": "private: the shipped lock path is shared by every daemon on this box",
    "host.drop_caches": "false: dropping the page cache of a shared box slows everyone's tests",
}
#: HEALTHCHECK of the docker-healthcheck tool: the daemon's probe cadence (15 s x 4); start period > load.
HEALTH = {"interval_s": 15, "timeout_s": 10, "retries": 4, "start_period_s": 60}
AUTOHEAL_EVERY_S = 5.0
NS = 1_000_000_000


@dataclass(frozen=True)
class Target:
    """Where a tool's model server answers and what it is called."""

    tool: str
    container: str
    port: int
    key: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Tool(Protocol):
    target: Target

    def up(self) -> None: ...

    def down(self) -> None: ...


@dataclass(frozen=True)
class Trial:
    """What all tools of one trial share: run label, model server, temp dir."""

    run_id: str
    server: Server
    tmp: Path
    daemon_host: tuple[tuple[str, Any], ...] = ()  # extra daemon ``host`` keys of this trial's fault
    daemon_env: tuple[tuple[str, str], ...] = ()  # the daemon's extra environment (a test seam's variable)

    def target(self, tool: str) -> Target:
        name = f"vsup-bench-cmp-{tool}-{secrets.token_hex(4)}"
        return Target(tool, name, free_port(), secrets.token_hex(16))

    def env(self) -> dict[str, str]:
        return dict(self.server.env)


def remove_container(name: str) -> None:
    client = docker.from_env()
    try:
        with contextlib.suppress(NotFound, DockerException):
            client.containers.get(name).remove(force=True)
    finally:
        client.close()


class DaemonTool:
    """The real vllm-supervisor daemon with shipped defaults (see DAEMON_TEST_BOX_CHANGES)."""

    def __init__(self, trial: Trial, backoff_initial_s: float | None = None) -> None:
        self.trial = trial
        self.backoff_initial_s = backoff_initial_s
        #: Extra ``host`` keys of a fault that needs them (bench/compare_faults.py: the memory guard row).
        self.host_extra: dict[str, Any] = dict(trial.daemon_host)
        tool = "vllm-supervisor" if backoff_initial_s is None else "vllm-supervisor-backoff1"
        self.target = trial.target(tool)
        self.work = trial.tmp / tool
        self.proc: DaemonProc | None = None

    def write(self) -> Path:
        self.work.mkdir(parents=True)
        name = self.trial.server.profile
        key_file = self.work / f"{name}.key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.target.key + "\n")
        profile = {
            "name": name,
            "container": {
                "name": self.target.container,
                "image": self.trial.server.image,
                "command": list(self.trial.server.command),
                "env": self.trial.env(),
                "ports": [f"127.0.0.1:{self.target.port}:8000/tcp"],
                "labels": {TEST_LABEL: self.trial.run_id},
                **self.trial.server.profile_container(),
            },
            "api_key": {"file": str(key_file), "inject_env": "VLLM_API_KEY"},
        }
        if self.trial.server.probes:
            profile["probes"] = dict(self.trial.server.probes)
        profile_path = self.work / f"{name}.yaml"
        profile_path.write_text(yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
        config = {
            "state_dir": str(self.work / "state"),
            "socket_path": str(self.work / "control.sock"),
            "restore_dir": str(self.work / "restore"),
            "profiles": [str(profile_path)],
            "host": {"drop_caches": False, "load_lock_path": str(self.work / "load.lock"), **self.host_extra},
        }
        if self.backoff_initial_s is not None:
            config["backoff"] = {"initial_s": self.backoff_initial_s}
        path = self.work / "daemon.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return path

    def up(self) -> None:
        self.proc = DaemonProc(self.write(), self.work)
        self.proc.start(extra_env=dict(self.trial.daemon_env))

    def events(self) -> list[str]:
        """The daemon's event names with their reason/outcome (for the report)."""
        if self.proc is None:
            return []
        out = []
        with contextlib.suppress(Exception):
            for e in self.proc.events(self.trial.server.profile, n=300):
                f = e.get("fields", {})
                extra = f.get("new") or f.get("outcome") or f.get("reason") or f.get("kind") or ""
                out.append(f"{e['ts']:.1f} {e['name']} {extra}".rstrip())
        return out

    def down(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.terminate(timeout=30)
            self.proc.close()
        remove_container(self.target.container)


def _run_kwargs(trial: Trial, t: Target, policy: str) -> dict[str, Any]:
    return {
        "image": trial.server.image,
        "name": t.container,
        "command": list(trial.server.command),
        "environment": {**trial.env(), "VLLM_API_KEY": t.key},
        "ports": {"8000/tcp": ("127.0.0.1", t.port)},
        "labels": {TEST_LABEL: trial.run_id},
        "detach": True,
        "restart_policy": {"Name": policy},
        **trial.server.docker_kwargs(),
    }


class DockerPolicyTool:
    """``docker run -d --restart on-failure|unless-stopped`` (Docker's own restart policies)."""

    def __init__(self, trial: Trial, policy: str, healthcheck: bool = False, liveness: bool = False) -> None:
        self.trial = trial
        self.policy = policy
        self.healthcheck = healthcheck
        tool = "docker-healthcheck" if healthcheck else "k8s-liveness" if liveness else f"docker-{policy}"
        self.target = trial.target(tool)
        self.liveness = Liveness(self.target.url, self.target.container) if liveness else None

    def up(self) -> None:
        kw = _run_kwargs(self.trial, self.target, self.policy)
        if self.healthcheck:
            probe = "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=8)"
            kw["healthcheck"] = {
                "test": ["CMD", "python3", "-c", probe],
                "interval": HEALTH["interval_s"] * NS,
                "timeout": HEALTH["timeout_s"] * NS,
                "retries": HEALTH["retries"],
                "start_period": HEALTH["start_period_s"] * NS,
            }
        client = docker.from_env()
        try:
            client.containers.run(**kw)
        finally:
            client.close()
        if self.liveness is not None:
            self.liveness.start()

    def down(self) -> None:
        if self.liveness is not None:
            self.liveness.stop()
        remove_container(self.target.container)


def ensure_supervisord() -> Path:
    """The supervisord binary of its own venv under the cache dir (installed from PyPI once)."""
    exe = SUPERVISORD_VENV / "bin" / "supervisord"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(SUPERVISORD_VENV)], check=True, timeout=300)
        pip = [str(SUPERVISORD_VENV / "bin" / "pip"), "install", "-q", f"supervisor=={SUPERVISORD_VERSION}"]
        subprocess.run(pip, check=True, timeout=600)
    return exe


def supervisord_env() -> dict[str, str]:
    """This environment without ``PYTHONPATH``: a checkout on it (``PYTHONPATH=$PWD``, how the bench is run
    from a worktree) shadows supervisord's own ``supervisor`` package with ours (ModuleNotFoundError:
    ``supervisor.supervisord``), and supervisord never starts."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


class SupervisordTool:
    """supervisord running ``docker run --rm`` in the foreground with ``autorestart=true``."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.target = trial.target("supervisord")
        self.work = trial.tmp / "supervisord"
        self.proc: subprocess.Popen[bytes] | None = None

    def conf(self) -> Path:
        self.work.mkdir(parents=True)
        t = self.target
        env_flags = " ".join(f"-e {k}={v}" for k, v in self.trial.env().items())
        server = self.trial.server
        cmd = (
            f"docker run --rm --name {t.container} -p 127.0.0.1:{t.port}:8000"
            f" -l {TEST_LABEL}={self.trial.run_id} -e VLLM_API_KEY {env_flags} {' '.join(server.cli_flags())}"
            f" {server.image} {' '.join(server.command)}"
        )
        text = "\n".join(
            [
                "[supervisord]",
                "nodaemon=true",
                f"logfile={self.work / 'supervisord.log'}",
                f"pidfile={self.work / 'supervisord.pid'}",
                f"childlogdir={self.work}",
                "",
                "[program:vllm]",
                f"command={cmd}",
                "autorestart=true",
                f'environment=VLLM_API_KEY="{t.key}"',
                f"stdout_logfile={self.work / 'vllm.log'}",
                "redirect_stderr=true",
                "",
            ]
        )
        path = self.work / "supervisord.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # holds the API key
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    def up(self) -> None:
        exe = ensure_supervisord()
        conf = self.conf()
        log = (self.work / "stdout.log").open("ab")
        self.proc = subprocess.Popen(
            [str(exe), "-n", "-c", str(conf)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=supervisord_env(),
        )
        log.close()

    def log_tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            lines = (self.work / "supervisord.log").read_text(encoding="utf-8", errors="replace").splitlines()
            return "\n".join(lines[-n:])
        return ""

    def down(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        remove_container(self.target.container)


class Autoheal:
    """The autoheal pattern: every 5 s ``docker ps --filter health=unhealthy`` -> ``docker restart``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.restarts: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="autoheal", daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        ps = [
            "docker",
            "ps",
            "-q",
            "--filter",
            "health=unhealthy",
            "--filter",
            f"label={TEST_LABEL}={self.run_id}",
        ]
        while not self._stop.wait(AUTOHEAL_EVERY_S):
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                out = subprocess.run(ps, capture_output=True, text=True, timeout=30, check=False)
                for cid in out.stdout.split():
                    self.restarts.append((time.time(), cid))
                    restart = ["docker", "restart", "-t", "10", cid]
                    subprocess.run(restart, capture_output=True, timeout=60, check=False)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=90)


def cleanup_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)

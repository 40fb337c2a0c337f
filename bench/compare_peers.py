"""Two more restarters of ``bench.compare`` (issue 40), and :func:`make_tools`, which builds every tool.

* ``systemd``: a unit as a user writes it for a container: ``ExecStartPre=-docker rm -f NAME``,
  ``ExecStart=docker run --rm --name NAME ...`` in the foreground, ``ExecStop=docker stop NAME``,
  ``Restart=always``, ``RestartSec=10`` (systemd's own default is 100 ms; the how-tos write 5-10 s so a
  crash loop does not hit the start limit of 5 starts in 10 s), other keys default. This box has no
  systemd as PID 1: the unit runs under a real systemd in a container (the image of
  tests/test_systemd_real.py, ``tools.images.ensure_systemd_image``) with the host's Docker socket and the
  host's static ``docker`` CLI bind-mounted, so its ``docker run`` creates the model container on the
  host's dockerd like every other tool's.
* ``bash-loop``: the bash suite's health loop (bench/bash_loop.sh: MiaAI-Lab's ``supervise.sh`` in small,
  with its defaults: a 10 s loop, ``/health`` + a 16-token chat once a minute, 5 failures -> emergency
  stop, relaunch by ``docker rm -f`` + ``docker run -d`` after a 30 s doubling backoff, hold after 3 failed
  launches, breaker after 3 emergencies in 2 h, 15 min grace for a container it did not start).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bench.compare_tools import (
    TOOLS,
    DaemonTool,
    DockerPolicyTool,
    SupervisordTool,
    Tool,
    Trial,
    remove_container,
)
from tests.harness import TEST_LABEL, wait_for
from tools.images import ensure_systemd_image
from tools.systemd_env import box_exec

BASH_LOOP = Path(__file__).resolve().parent / "bash_loop.sh"
UNIT = "vllm-model.service"
RESTART_SEC = 10


def docker_run_line(trial: Trial, container: str, port: int, detach: bool) -> list[str]:
    """The ``docker run`` argv a user writes for this trial's server (the key from ``VLLM_API_KEY``)."""
    server = trial.server
    argv = ["docker", "run", "-d" if detach else "--rm", "--name", container]
    argv += ["-p", f"127.0.0.1:{port}:8000", "-l", f"{TEST_LABEL}={trial.run_id}", "-e", "VLLM_API_KEY"]
    for k, v in trial.env().items():
        argv += ["-e", f"{k}={v}"]
    return [*argv, *server.cli_flags(), server.image, *server.command]


def _docker_cli() -> str:
    path = shutil.which("docker")
    if path is None:
        raise RuntimeError("no docker CLI on PATH: the systemd box bind-mounts the host's")
    return os.path.realpath(path)


class SystemdTool:
    """A systemd unit running ``docker run --rm`` in the foreground, ``Restart=always``."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.target = trial.target("systemd")
        self.box = f"{self.target.container}-box"

    def unit(self) -> str:
        t = self.target
        run = shlex.join(["/usr/bin/docker", *docker_run_line(self.trial, t.container, t.port, False)[1:]])
        return "\n".join(
            [
                "[Unit]",
                "Description=vLLM model server (docker run)",
                "",
                "[Service]",
                f"Environment=VLLM_API_KEY={t.key}",
                f"ExecStartPre=-/usr/bin/docker rm -f {t.container}",
                f"ExecStart={run}",
                f"ExecStop=/usr/bin/docker stop {t.container}",
                "Restart=always",
                f"RestartSec={RESTART_SEC}",
                "",
                "[Install]",
                "WantedBy=multi-user.target",
                "",
            ]
        )

    def sh(self, *argv: str, stdin: str | None = None, check: bool = True) -> str:
        proc = box_exec(self.box, argv, stdin=stdin, timeout=90)
        if check and proc.returncode != 0:
            raise RuntimeError(f"systemd box: {argv} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def up(self) -> None:
        image = ensure_systemd_image()
        subprocess.run(
            ["docker", "run", "-d", "--name", self.box, "--label", f"{TEST_LABEL}={self.trial.run_id}",
             "--network", "host", "-e", "container=docker",
             "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro", "--tmpfs", "/run", "--tmpfs", "/run/lock",
             "-v", "/var/run/docker.sock:/var/run/docker.sock",
             "-v", f"{_docker_cli()}:/usr/bin/docker:ro", image],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip
        up = ("running", "degraded")
        wait_for(lambda: self.sh("systemctl", "is-system-running", check=False).strip() in up, 60, 0.5)
        self.sh("sh", "-c", f"umask 077; cat > /etc/systemd/system/{UNIT}", stdin=self.unit())
        self.sh("systemctl", "daemon-reload")
        self.sh("systemctl", "start", "--no-block", UNIT)

    def gave_up(self) -> bool:
        """systemd stopped restarting it: the unit is ``failed`` (its start limit was hit)."""
        return self.sh("systemctl", "is-failed", UNIT, check=False).strip() == "failed"

    def log_tail(self, n: int = 15) -> str:
        with contextlib.suppress(Exception):
            return self.sh("journalctl", "-u", UNIT, "--no-pager", "-n", str(n), "-o", "cat", check=False)
        return ""

    def down(self) -> None:
        with contextlib.suppress(Exception):
            self.sh("systemctl", "stop", UNIT, check=False)
        remove_container(self.box)
        remove_container(self.target.container)


class BashLoopTool:
    """bench/bash_loop.sh supervising ``docker run -d`` (no restart policy)."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.target = trial.target("bash-loop")
        self.work = trial.tmp / "bash-loop"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        t = self.target
        run = shlex.join(docker_run_line(self.trial, t.container, t.port, True))
        return {
            **os.environ,
            "NAME": t.container,
            "URL": t.url,
            "KEY": t.key,
            "VLLM_API_KEY": t.key,
            "MODEL": self.trial.server.served,
            "RUN": run,
        }

    def up(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self) -> None:
        """Start the loop (again): it launches the container if none runs, else adopts it."""
        log = (self.work / "loop.log").open("ab")
        self.proc = subprocess.Popen(
            ["bash", str(BASH_LOOP)],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def kill9(self) -> None:
        """SIGKILL the loop and whatever it runs (a curl, a sleep); its container lives on."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, n: int = 15) -> str:
        with contextlib.suppress(OSError):
            lines = (self.work / "loop.log").read_text(encoding="utf-8", errors="replace").splitlines()
            return "\n".join(lines[-n:])
        return ""

    def gave_up(self) -> bool:
        tail = self.log_tail(200)
        return "hold:" in tail or "breaker open" in tail

    def down(self) -> None:
        self.kill9()
        time.sleep(0.2)  # a `docker run` it had under way lands before the removal
        remove_container(self.target.container)


def make_tools(trial: Trial, names: tuple[str, ...] = TOOLS) -> dict[str, Tool]:
    """One fresh instance of each named tool for one trial."""
    made: dict[str, Tool] = {}
    for n in names:
        if n == "vllm-supervisor":
            made[n] = DaemonTool(trial)
        elif n == "vllm-supervisor-backoff1":
            made[n] = DaemonTool(trial, backoff_initial_s=1.0)
        elif n == "docker-on-failure":
            made[n] = DockerPolicyTool(trial, "on-failure")
        elif n == "docker-unless-stopped":
            made[n] = DockerPolicyTool(trial, "unless-stopped")
        elif n == "supervisord":
            made[n] = SupervisordTool(trial)
        elif n == "docker-healthcheck":
            made[n] = DockerPolicyTool(trial, "unless-stopped", healthcheck=True)
        elif n == "k8s-liveness":
            made[n] = DockerPolicyTool(trial, "unless-stopped", liveness=True)
        elif n == "systemd":
            made[n] = SystemdTool(trial)
        elif n == "bash-loop":
            made[n] = BashLoopTool(trial)
        else:
            raise ValueError(f"unknown tool {n!r}")
    return made

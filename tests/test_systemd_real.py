"""The unit file under a real systemd (PID 1 of a container), supervising a simulator container.

The systemd image is built by ``tools.images`` (cached by recipe hash) and the daemon runs from a venv
of Debian's python3.11 (``tools.systemd_env``) bind-mounted at the same path, with this checkout on
PYTHONPATH. The unit is systemd/vllm-supervisor.service as shipped plus the drop-in ``DROPIN`` (ExecStart,
PYTHONPATH, WatchdogSec=10, RestartSec=1 for test speed). The container shares the host network, so the
daemon probes the simulator's published 127.0.0.1 port and alerts reach a receiver on 127.0.0.1.
Namespacing options (ProtectSystem=, PrivateTmp=...) are not enforced in such a container; seccomp-based
ones (SystemCallFilter=, MemoryDenyWriteExecute=, RestrictAddressFamilies=) and capabilities are.
Select with ``-m systemd_real``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.daemon_harness import ProfileSpec, write_profile
from tests.harness import NAME_PREFIX, TEST_LABEL, WebhookReceiver, wait_for, webhook_receiver
from tools.images import ensure_systemd_image
from tools.systemd_env import box_exec, ensure_venv

pytestmark = [pytest.mark.systemd_real, pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
UNIT = "vllm-supervisor.service"
FAILURE_UNIT = "vllm-supervisor-failure@.service"
ETC = "/etc/vllm-supervisor"
PROFILE = "sd-sim"
FAILED_TITLE = "supervisor daemon down: systemd gave up restarting it"


def dropin(venv: Path, main: bool) -> str:
    """The test drop-in: which lines of the shipped unit it changes (everything else is as shipped)."""
    argv = "-m supervisor" if main else "-m supervisor.cli.main unit-failed %i"
    lines = [
        "[Service]",
        "ExecStart=",
        f"ExecStart={venv}/bin/python {argv} --config {ETC}/daemon.yaml",
        f"Environment=PYTHONPATH={ROOT} PYTHONDONTWRITEBYTECODE=1",
    ]
    if main:
        lines += ["WatchdogSec=10", "RestartSec=1"]
    return "\n".join(lines) + "\n"


@dataclass
class Box:
    """The systemd container and what runs in it."""

    name: str
    test_id: str
    receiver: WebhookReceiver
    etc: Path

    def sh(self, *argv: str, check: bool = True, stdin: str | None = None) -> str:
        proc = box_exec(self.name, argv, stdin=stdin, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc.stdout

    def show(self, prop: str, unit: str = UNIT) -> str:
        return self.sh("systemctl", "show", "-p", prop, "--value", unit).strip()

    def status_json(self) -> dict[str, Any]:
        venv = ensure_venv()
        out = self.sh(
            "env",
            f"PYTHONPATH={ROOT}",
            f"{venv}/bin/python",
            "-m",
            "supervisor.cli",
            "status",
            "--json",
            check=False,
        )
        data = json.loads(out)
        assert isinstance(data, dict)
        return data

    def profile(self) -> dict[str, Any] | None:
        try:
            profiles = self.status_json()["profiles"]
        except (ValueError, KeyError):
            return None
        return dict(profiles[0]) if profiles else None

    def wait_running(self, timeout: float = 90) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            st = self.profile()
            return st if st is not None and st["state"] == "RUNNING" else None

        return wait_for(running, timeout, 0.5, "profile RUNNING (supervisorctl status --json in the box)")

    def journal(self) -> str:
        return self.sh("journalctl", "-u", UNIT, "--no-pager", "-n", "60", check=False)

    def failure_alerts(self) -> list[dict[str, Any]]:
        return [
            r.json() for r in self.receiver.received() if r.body and r.json().get("title") == FAILED_TITLE
        ]


def _secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _write_etc(etc: Path, test_id: str, receiver: WebhookReceiver) -> None:
    """/etc/vllm-supervisor of the box: a daemon config, one simulator profile, the alert URL (0600)."""
    (etc / "profiles" / "secrets").mkdir(parents=True)
    spec = ProfileSpec(
        name=PROFILE,
        container=f"{NAME_PREFIX}sd-{test_id}",
        api_key=False,
        interval_s=2.0,
        adopt_grace_s=5.0,
        extra={"api_key": {"file": "secrets/sd-sim.key", "generate": True}},
    )
    write_profile(etc / "profiles", spec, test_id)
    _secret(etc / "alert.url", f"{receiver.url}/alert\n")
    doc = {
        "state_dir": "/var/lib/vllm-supervisor",
        "socket_path": "/run/vllm-supervisor/control.sock",
        "log_level": "debug",
        "profiles": [f"profiles/{PROFILE}.yaml"],
        # warn: a labelled kernel line another test writes must not kill this box's simulator
        "host": {"drop_caches": False, "memory_guard": {"enabled": False}, "kernel_memory_error": "warn"},
        "backoff": {"initial_s": 1, "max_s": 4},
        "maintenance": {"enabled": False},
        "alerts": {"channels": [{"kind": "generic", "name": "local", "url_file": f"{ETC}/alert.url"}]},
    }
    (etc / "daemon.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


@pytest.fixture(scope="module")
def box(sim_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """A booted systemd container with the unit installed and started, the simulator RUNNING."""
    image = ensure_systemd_image()
    venv = ensure_venv()
    test_id = uuid.uuid4().hex[:8]
    name = f"{NAME_PREFIX}systemd-{test_id}"
    etc = tmp_path_factory.mktemp("etc")
    client = docker.from_env(timeout=60)
    with webhook_receiver() as receiver:
        b = Box(name, test_id, receiver, etc)
        try:
            _write_etc(etc, test_id, receiver)
            subprocess.run(
                ["docker", "run", "-d", "--name", name, "--label", f"{TEST_LABEL}={test_id}",
                 "--network", "host", "-e", "container=docker",
                 "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                 "-v", "/var/run/docker.sock:/var/run/docker.sock",
                 "-v", f"{ROOT}:{ROOT}:ro", "-v", f"{venv}:{venv}:ro", "-v", f"{etc}:{ETC}", image],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            up = ("running", "degraded")
            wait_for(lambda: b.sh("systemctl", "is-system-running", check=False).strip() in up, 60, 0.5)
            for unit, main in ((UNIT, True), (FAILURE_UNIT, False)):
                b.sh(
                    "sh",
                    "-c",
                    f"cat > /etc/systemd/system/{unit}",
                    stdin=(ROOT / "systemd" / unit).read_text(),
                )
                b.sh("mkdir", "-p", f"/etc/systemd/system/{unit}.d")
                b.sh("sh", "-c", f"cat > /etc/systemd/system/{unit}.d/test.conf", stdin=dropin(venv, main))
            b.sh("systemctl", "daemon-reload")
            b.sh("systemctl", "start", UNIT)
            b.wait_running()
            yield b
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                client.containers.get(name).remove(force=True, v=True)
            for c in client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={test_id}"}):
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True, v=True)
            client.close()


def test_ready_and_status_text(box: Box) -> None:
    """Type=notify: the unit is active (READY=1 arrived) and StatusText carries the daemon's STATUS= line."""
    assert box.show("ActiveState") == "active"
    assert box.show("SubState") == "running"
    status = wait_for(lambda: box.show("StatusText") if "RUNNING" in box.show("StatusText") else None, 30)
    assert PROFILE in status
    assert box.show("WatchdogUSec") == "10s"


def test_stop_leaves_model_running_and_start_adopts(box: Box) -> None:
    """systemctl stop ends the daemon only; systemctl start adopts the same container."""
    before = box.wait_running()
    box.sh("systemctl", "stop", UNIT)
    assert box.show("ActiveState") == "inactive"
    client = docker.from_env(timeout=60)
    try:
        c = client.containers.get(before["container_id"])
        assert c.status == "running"
    finally:
        client.close()
    box.sh("systemctl", "start", UNIT)
    after = box.wait_running()
    assert after["container_id"] == before["container_id"]


def test_frozen_daemon_killed_by_watchdog_and_new_one_adopts(box: Box) -> None:
    """kill -STOP of MainPID: the watchdog kills it, systemd restarts it once, the container is adopted."""
    before = box.wait_running()
    restarts = int(box.show("NRestarts"))
    pid = box.show("MainPID")
    box.sh("kill", "-STOP", pid)
    wait_for(lambda: int(box.show("NRestarts")) == restarts + 1, 60, 0.5, "NRestarts + 1 after the watchdog")
    assert "watchdog" in box.journal().lower()
    new_pid = wait_for(lambda: (p := box.show("MainPID")) not in ("0", pid) and p, 30, 0.5, "a new MainPID")
    assert new_pid != pid
    after = box.wait_running()
    assert after["container_id"] == before["container_id"]
    assert box.failure_alerts() == []  # an automatic restart is not a failure for good


def test_failed_for_good_alerts_through_on_failure(box: Box) -> None:
    """A daemon that cannot start (broken config) exits 2, which the unit does not restart into a loop
    (RestartPreventExitStatus=2): failed at once, no restart; OnFailure= alerts the webhook."""
    config = box.etc / "daemon.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("log_level: debug", "log_level: loud"))
    box.sh("systemctl", "restart", UNIT, check=False)
    try:
        wait_for(lambda: box.show("ActiveState") == "failed", 90, 0.5, "the unit failed for good")
    except AssertionError as exc:
        state = {p: box.show(p) for p in ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus")}
        raise AssertionError(f"{exc}\n{state}\n{box.journal()}") from None
    assert box.show("NRestarts") == "0"  # exit 2 is not restarted: no start-limit loop
    assert "Start request repeated too quickly" not in box.journal()
    alerts = wait_for(box.failure_alerts, 60, 0.5, "the OnFailure= alert at the receiver")
    assert len(alerts) == 1
    alert = alerts[0]
    assert alert["severity"] == "critical"
    assert alert["profile"] == UNIT
    assert alert["new_state"] == "failed"
    details = dict(alert["details"])
    assert details.get("result") == "exit-code"
    assert details.get("exit status") == "2"

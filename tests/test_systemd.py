"""Tests of the systemd notifier against real AF_UNIX datagram sockets, and of the unit file."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.adapters.host.systemd import SystemdNotifier, watchdog_interval_s

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "vllm-supervisor.service"


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket standing in for systemd's notify socket (filesystem path)."""
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_messages_arrive_on_path_socket(listener: tuple[socket.socket, str]) -> None:
    """READY, STATUS, WATCHDOG and STOPPING arrive verbatim; status text is kept on one line."""
    sock, path = listener
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": path})
    assert notifier.enabled
    assert notifier.ready("2 profiles")
    assert sock.recv(4096) == b"READY=1\nSTATUS=2 profiles"
    assert notifier.status("m1 RUNNING\nm2 STARTING 45%")
    assert sock.recv(4096) == b"STATUS=m1 RUNNING m2 STARTING 45%"
    assert notifier.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert notifier.stopping()
    assert sock.recv(4096) == b"STOPPING=1"


def test_abstract_namespace_socket() -> None:
    """An '@' address reaches a socket bound in the abstract namespace."""
    name = f"vsup-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_noop_without_socket_and_false_when_socket_gone(tmp_path: Path) -> None:
    """Without NOTIFY_SOCKET nothing is sent; a vanished socket gives False, not an exception."""
    assert not SystemdNotifier.from_env({}).enabled
    assert SystemdNotifier.from_env({}).ready() is False
    gone = SystemdNotifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "missing.sock")})
    assert gone.enabled
    assert gone.watchdog() is False
    assert not SystemdNotifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_watchdog_interval() -> None:
    """WATCHDOG_USEC is read in seconds, only for this pid when WATCHDOG_PID is set."""
    me = str(os.getpid())
    assert watchdog_interval_s({"WATCHDOG_USEC": "60000000"}) == 60.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": me}) == 30.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "junk"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval_s({}) is None
    assert SystemdNotifier(None, {"WATCHDOG_USEC": "5000000"}).watchdog_interval_s() == 5.0


def _verify(unit_text: str, tmp_path: Path) -> str:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (the setup script installs systemd)")
    unit = tmp_path / "vllm-supervisor.service"
    unit.write_text(unit_text)
    proc = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    return (proc.stdout + proc.stderr).strip() + (f"\n(exit {proc.returncode})" if proc.returncode else "")


def _runnable(text: str) -> str:
    """The unit with ExecStart pointing at an executable that exists here (the venv's python)."""
    lines = [
        f"ExecStart={sys.executable} -m supervisor --config /etc/vllm-supervisor/daemon.yaml"
        if line.startswith("ExecStart=")
        else line
        for line in text.splitlines()
    ]
    return "\n".join(lines) + "\n"


def test_unit_file_verifies_clean(tmp_path: Path) -> None:
    """systemd-analyze verify reports nothing for the unit (ExecStart swapped for an existing binary)."""
    text = UNIT.read_text()
    for needed in (
        "Type=notify",
        "NotifyAccess=main",
        "ExecStart=/opt/vllm-supervisor/venv/bin/vllm-supervisor --config /etc/vllm-supervisor/daemon.yaml",
        "WatchdogSec=60",
        "Restart=on-failure",
        "KillMode=mixed",
        "RuntimeDirectory=vllm-supervisor",
        "StateDirectory=vllm-supervisor",
    ):
        assert needed in text.splitlines(), needed
    assert _verify(_runnable(text), tmp_path) == ""


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The verify check is not vacuous: a typo'd directive and a missing binary are reported."""
    broken = _runnable(UNIT.read_text()).replace("WatchdogSec=60", "WatchdogSecs=60")
    assert "WatchdogSecs" in _verify(broken, tmp_path)
    missing = UNIT.read_text()
    assert "vllm-supervisor" in _verify(missing, tmp_path)


FAILURE_UNIT = UNIT.parent / "vllm-supervisor-failure@.service"


def test_hardening_lines_on_the_file() -> None:
    """Namespacing cannot be checked in the systemd test container, so the lines themselves are checked."""
    lines = UNIT.read_text().splitlines()
    for needed in (
        "OnFailure=vllm-supervisor-failure@%n.service",
        "OOMScoreAdjust=-900",
        "ProtectSystem=full",
        "ReadWritePaths=-/etc/vllm-supervisor/profiles",
        "RuntimeDirectory=vllm-supervisor",
        "LimitNOFILE=65536",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=CAP_CHOWN CAP_SYSLOG CAP_DAC_READ_SEARCH CAP_SYS_PTRACE CAP_KILL",
        "RestartPreventExitStatus=2",
        "SystemCallFilter=@system-service syslog ptrace process_vm_readv",
    ):
        assert needed in lines, needed
    settings = {line.split("=", 1)[0] for line in lines if "=" in line and not line.startswith("#")}
    # these would break drop_caches, the kernel-log diagnosis, /dev/shm inspection, probes and alerts
    # ... and these a /tmp-mounted profile and a patch rollback into /opt or /home (issue 38)
    for forbidden in (
        *("ProtectKernelTunables", "ProtectKernelLogs", "PrivateDevices", "PrivateNetwork"),
        *("PrivateTmp", "ProtectHome"),
    ):
        assert forbidden not in settings, forbidden


def test_failure_unit_verifies_clean(tmp_path: Path) -> None:
    """The OnFailure= handler template verifies (instantiated, ExecStart swapped for an existing binary)."""
    text = FAILURE_UNIT.read_text()
    assert (
        "ExecStart=/opt/vllm-supervisor/venv/bin/supervisorctl unit-failed %i "
        "--config /etc/vllm-supervisor/daemon.yaml"
    ) in text.splitlines()
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (the setup script installs systemd)")
    unit = tmp_path / "vllm-supervisor-failure@vllm-supervisor.service.service"
    unit.write_text(_runnable(text))
    proc = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (proc.stdout + proc.stderr).strip() == ""
    assert proc.returncode == 0

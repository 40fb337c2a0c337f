"""supervisorctl run as a real subprocess against a real ControlServer with a canned handler."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from supervisor.adapters.control.server import ControlServer
from supervisor.cli import common, main
from tests.harness import AS_NOBODY, REPO, WebhookReceiver
from tests.test_cli_daemon import EVENT_KEYS, START_ROW_KEYS, STATUS_DAEMON_KEYS, STATUS_PROFILE_KEYS

NOW = time.time()


def profile(name: str, state: str, **extra: Any) -> dict[str, Any]:
    """One profile entry shaped like docs/contract.md's status JSON, timed relative to now."""
    now = time.time()
    base: dict[str, Any] = {
        "name": name,
        "state": state,
        "since": now - 3700,
        "container": f"vllm-{name}",
        "container_id": "0123456789abcdef" * 4,
        "restarts": 2,
        "breaker": {"state": "closed", "emergencies": 1, "window_s": 7200, "limit": 3},
        "last_probe": {"ok": True, "latency_ms": 120.4, "at": now - 30},
        "kv_pool": {"tokens": 1_013_816, "baseline_tokens": 557_599},
        "load_progress": {"pct": None},
        "next_maintenance": now + 2 * 86400 + 3 * 3600 + 60,
        "next_maintenance_local": "Sun 2026-12-06 04:00 CET",
        "uptime_s": 3700,
        "intent": "run",
        "auth": "enforced",
        "last_reason": "",
        "last_diagnosis": None,
        "holds_load_slot": False,
        "start_attempts": 1,
        "timeouts": {},
        "companions": [],
        "base_url": f"http://127.0.0.1:8000/{name}",
    }
    out = base | extra
    assert set(out) >= STATUS_PROFILE_KEYS  # the shape the real daemon sends (tests/test_cli_daemon.py)
    return out


@dataclass
class CannedDaemon:
    """Answers like the daemon would; records every request."""

    profiles: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail: dict[str, str] = field(default_factory=dict)

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        cmd, args = request["cmd"], request["args"]
        if cmd in self.fail:
            return {"ok": False, "error": self.fail[cmd]}
        if cmd == "status":
            return self._status()
        return self._other(cmd, args)

    def _status(self) -> dict[str, Any]:
        daemon = {
            "pid": 4242,
            "version": "0.1.0",
            "uptime_s": 90061,
            "config": "/etc/vllm-supervisor/daemon.yaml",
            "docker": {"state": "answering", "since": NOW - 90061, "error": None},
            "load_slot": None,
        }
        assert set(daemon) >= STATUS_DAEMON_KEYS  # the shape the real daemon sends
        return {"ok": True, "data": {"daemon": daemon, "profiles": self.profiles}}

    @staticmethod
    def _other(cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        """events and history in the daemon's own shapes (daemon/api.py); any action: accepted."""
        if cmd == "events":
            events = [
                {
                    "ts": NOW - 60,
                    "name": "probe.failed",
                    "profile": "m1",
                    "fields": {"consecutive": 3, "why": "timed out"},
                },
                {"ts": NOW - 5, "name": "breaker.opened", "profile": "m1", "fields": {"emergencies": 3}},
            ]
            assert all(set(e) == EVENT_KEYS for e in events)
            return {"ok": True, "data": {"events": events[-args["n"] :]}}
        if cmd == "history":
            starts = [
                {"ts": NOW - 86400, "profile": args["name"], "outcome": "ready", "kv_tokens": 1_013_816,
                 "max_concurrency": 4.08, "load_s": 742.0, "mem_available_gib": 112.3,
                 "container_id": "ab" * 32},
                {"ts": NOW - 3600, "profile": args["name"], "outcome": "failed_oom", "kv_tokens": None,
                 "max_concurrency": None, "load_s": None, "container_id": "cd" * 32},
            ]  # fmt: skip
            assert all(set(r) >= START_ROW_KEYS for r in starts)
            return {"ok": True, "data": {"starts": starts}}
        return {"ok": True, "data": {"message": f"{cmd} {args.get('name')}: accepted"}}


@pytest.fixture
def daemon(sock_dir: Path) -> Iterator[tuple[CannedDaemon, Path]]:
    """A real control server answering with canned data."""
    canned = CannedDaemon(profiles=[profile("m1", "RUNNING"), profile("m2", "RUNNING")])
    server = ControlServer(sock_dir / "control.sock", canned)
    server.start()
    yield canned, server.path
    server.stop()


def run(
    *args: str, socket: Path | None = None, env: dict[str, str] | None = None, as_nobody: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run supervisorctl as a separate process."""
    argv = [sys.executable, "-m", "supervisor.cli"]
    if socket is not None:
        argv += ["--socket", str(socket)]
    argv += list(args)
    if as_nobody:
        argv = [*AS_NOBODY, *argv]
    full_env = {k: v for k, v in os.environ.items() if k != common.SOCKET_ENV} | (env or {})
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=REPO, env=full_env, check=False
    )


def test_status_table_all_running_exit_0(daemon: tuple[CannedDaemon, Path]) -> None:
    """All RUNNING: exit 0 and a table with every contracted column filled in."""
    _, path = daemon
    proc = run("status", socket=path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("daemon pid 4242  version 0.1.0  up 1 d 1 h")
    for column in (
        "NAME",
        "STATE",
        "SINCE",
        "CONTAINER",
        "UPTIME",
        "LAST PROBE",
        "RESTARTS",
        "BREAKER",
        "LOAD",
    ):
        assert column in lines[1]
    row = lines[2]
    for cell in ("m1", "RUNNING", "1 h 1 min ago", "vllm-m1", "1 h 1 min", "closed 1/3"):
        assert cell in row, cell
    assert re.search(r"ok 120ms 3\d s ago", row)
    assert "1,013,816 / 557,599 (+82%)" in row
    assert "Sun 2026-12-06 04:00 CET (in 2 d 3 h)" in row
    assert len(lines) == 4


def test_status_not_all_running_exit_3_shows_progress_and_open_breaker(sock_dir: Path) -> None:
    """One profile STARTING and one FATAL: exit 3, load % and an OPEN breaker are shown."""
    canned = CannedDaemon(
        profiles=[
            profile(
                "m1",
                "STARTING",
                load_progress={"pct": 45.0, "phase": "weights"},
                kv_pool={"tokens": None, "baseline_tokens": 557_599},
            ),
            profile("m2", "FATAL", breaker={"state": "open", "emergencies": 3, "window_s": 7200, "limit": 3}),
        ]
    )
    server = ControlServer(sock_dir / "c.sock", canned)
    server.start()
    try:
        proc = run("status", socket=server.path)
    finally:
        server.stop()
    assert proc.returncode == 3
    m1, m2 = proc.stdout.splitlines()[2:4]
    assert "45% weights" in m1
    assert "- / 557,599" in m1
    assert "OPEN 3/3" in m2


def test_status_json_shape_and_name_filter(daemon: tuple[CannedDaemon, Path]) -> None:
    """--json prints the daemon's status object; NAME sends the name and keeps only that profile."""
    canned, path = daemon
    proc = run("status", "--json", socket=path)
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["daemon"] == canned._status()["data"]["daemon"]  # passed through whole
    assert [p["name"] for p in data["profiles"]] == ["m1", "m2"]
    assert set(data["profiles"][0]) >= {"name", "state", "since", "breaker", "kv_pool", "load_progress"}
    proc = run("status", "m2", "--json", socket=path)
    assert [p["name"] for p in json.loads(proc.stdout)["profiles"]] == ["m2"]
    assert canned.requests[-1]["args"] == {"name": "m2"}
    unknown = run("status", "nope", socket=path)
    assert unknown.returncode == 1
    assert "no profile named 'nope'" in unknown.stderr


def test_unreachable_daemon_exit_4(sock_dir: Path) -> None:
    """No daemon: exit 4 with the socket path on stderr, nothing on stdout."""
    missing = sock_dir / "absent.sock"
    proc = run("status", socket=missing)
    assert proc.returncode == 4
    assert f"daemon not reachable at {missing}" in proc.stderr
    assert proc.stdout == ""
    assert run("stop", "m1", socket=missing).returncode == 4


def test_socket_from_environment(daemon: tuple[CannedDaemon, Path]) -> None:
    """$VLLM_SUPERVISOR_SOCKET is used when --socket is absent; the default path applies otherwise."""
    _, path = daemon
    assert run("status", env={common.SOCKET_ENV: str(path)}).returncode == 0
    assert common.socket_path(None, {}) == Path("/run/vllm-supervisor/control.sock")
    assert common.socket_path("/x.sock", {common.SOCKET_ENV: "/y.sock"}) == Path("/x.sock")


def test_actions_send_command_and_print_reply(daemon: tuple[CannedDaemon, Path]) -> None:
    """start/stop/restart/reset/maintenance send {cmd, args:{name}} and print the daemon's message."""
    canned, path = daemon
    for cmd in ("start", "stop", "restart", "reset"):
        proc = run(cmd, "m1", socket=path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"{cmd} m1: accepted"
        assert (canned.requests[-1]["cmd"], canned.requests[-1]["args"]) == (cmd, {"name": "m1"})
    proc = run("maintenance", "m1", "--now", socket=path)
    assert proc.returncode == 0
    assert canned.requests[-1]["args"] == {"name": "m1"}
    assert run("maintenance", "m1", socket=path).returncode == 2


def test_daemon_error_exit_1(daemon: tuple[CannedDaemon, Path]) -> None:
    """ok=false from the daemon: exit 1 and its error on stderr."""
    canned, path = daemon
    canned.fail["reset"] = "breaker of m1 is not open"
    proc = run("reset", "m1", socket=path)
    assert proc.returncode == 1
    assert "breaker of m1 is not open" in proc.stderr


def test_events_text_and_json(daemon: tuple[CannedDaemon, Path]) -> None:
    """events prints one line per event with key=value fields; --json a list; -n is passed on."""
    canned, path = daemon
    proc = run("events", "m1", "-n", "5", socket=path)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    assert "probe.failed" in lines[0]
    assert 'consecutive=3 why="timed out"' in lines[0]
    assert canned.requests[-1]["args"] == {"name": "m1", "n": 5}
    records = json.loads(run("events", "-n", "1", "--json", socket=path).stdout)
    assert [r["name"] for r in records] == ["breaker.opened"]
    assert canned.requests[-1]["args"] == {"name": None, "n": 1}


def test_history_table_and_json(daemon: tuple[CannedDaemon, Path]) -> None:
    """history shows one row per start with KV pool, concurrency, load time and memory before."""
    _, path = daemon
    proc = run("history", "m1", socket=path)
    assert proc.returncode == 0
    trend, header, ready, failed = proc.stdout.splitlines()
    assert trend.startswith("KV pool  █·")
    assert "KV TOKENS" in header
    assert "MEMAVAIL BEFORE" in header
    for cell in ("ready", "1,013,816", "4.08x", "12 min", "112.3 GiB"):
        assert cell in ready
    assert "failed_oom" in failed
    assert json.loads(run("history", "m1", "--json", socket=path).stdout)[1]["outcome"] == "failed_oom"


def test_history_on_an_ascii_terminal(daemon: tuple[CannedDaemon, Path]) -> None:
    """A terminal that cannot show the sparkline blocks gets '?' instead of a crash."""
    _, path = daemon
    proc = run("history", "m1", socket=path, env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("KV pool  ?")
    assert "1,013,816" in proc.stdout


def test_permission_denied_as_nobody(sock_dir: Path) -> None:
    """A user outside the socket's group (root:root, 0660) gets exit 4 and the group explained."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a root-owned socket and switch to nobody")
    server = ControlServer(sock_dir / "c.sock", CannedDaemon(), mode=0o660, group="root")
    server.start()
    try:
        proc = run("status", socket=server.path, as_nobody=True)
    finally:
        server.stop()
    assert proc.returncode == 4
    assert f"permission denied on {server.path}: your user is not in the socket's group root" in proc.stderr


def test_test_alert_sends_to_every_channel(tmp_path: Path, webhook: WebhookReceiver) -> None:
    """test-alert (offline, from the daemon config) posts to each channel and reports per channel."""
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        "state_dir: ./state\nsocket_path: ./c.sock\nprofiles: []\n"
        "alerts:\n  channels:\n"
        f"    - {{kind: generic, name: ops, url: '{webhook.url}/hook/TOKEN-abc123'}}\n"
        f"    - {{kind: slack, name: chat, url: '{webhook.url}/slack/TOKEN-abc123'}}\n",
        encoding="utf-8",
    )
    proc = run("test-alert", "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr
    assert "ops" in proc.stdout
    assert "chat" in proc.stdout
    paths = sorted(r.path for r in webhook.wait_for_count(2))
    assert paths == ["/hook/TOKEN-abc123", "/slack/TOKEN-abc123"]
    assert "TOKEN-abc123" not in proc.stdout + proc.stderr  # webhook tokens are secrets


def test_test_alert_with_no_channel_exits_2(tmp_path: Path) -> None:
    """test-alert with a config that has no channel says so and exits 2."""
    cfg = tmp_path / "daemon.yaml"
    cfg.write_text("state_dir: ./state\nsocket_path: ./c.sock\nprofiles: []\n", encoding="utf-8")
    proc = run("test-alert", "--config", str(cfg))
    assert proc.returncode == 2


def test_check_config_offline(tmp_path: Path) -> None:
    """check-config runs without a daemon and fails on a broken file."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbogus_key: 1\n")
    proc = run("check-config", str(bad), socket=tmp_path / "no-daemon.sock")
    assert proc.returncode != 0
    assert str(bad) in proc.stdout + proc.stderr


def test_diagnose_options_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    """--log and --container cannot be combined (usage error, exit 2)."""
    with pytest.raises(SystemExit) as info:
        main.main(["diagnose", "--log", "a", "--container", "b"])
    assert info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_restore_dir_comes_from_the_option_then_the_config_then_cwd(tmp_path: Path) -> None:
    """--out/--from wins; else the config's restore_dir; else ./restore when no default config exists."""
    from supervisor.cli.common import DEFAULT_CONFIG, EXIT_USAGE
    from supervisor.cli.offline import DEFAULT_RESTORE_DIR, restore_dir

    cfg = tmp_path / "daemon.yaml"
    cfg.write_text(
        f"state_dir: {tmp_path}/s\nrestore_dir: {tmp_path}/snaps\nprofiles: []\n", encoding="utf-8"
    )
    assert restore_dir("/x", str(cfg)) == Path("/x")
    assert restore_dir(None, str(cfg)) == tmp_path / "snaps"
    if not DEFAULT_CONFIG.exists():
        assert restore_dir(None, None) == DEFAULT_RESTORE_DIR
    bad = tmp_path / "bad.yaml"
    bad.write_text("restore_dir: [1]\n", encoding="utf-8")
    assert restore_dir(None, str(bad)) == EXIT_USAGE

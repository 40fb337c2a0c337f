"""`supervisorctl` as a real subprocess against a REAL daemon supervising simulator containers.

The CLI tests in test_cli.py talk to a canned server; these pin the exact reply shapes the daemon
sends and the CLI's behaviour on them: status (table, --json, exit codes with a manual stop),
start/restart --wait, a failed start's --wait verdict, logs (current, --follow, --previous), diagnose
--previous, events, history, reset, and companion checks against a real HTTP server.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from tests.daemon_harness import DaemonProc
from tests.harness import REPO, WebhookReceiver, wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STATUS_DAEMON_KEYS = {"pid", "version", "uptime_s", "config", "docker", "load_slot"}
STATUS_PROFILE_KEYS = {
    "name", "state", "since", "container", "container_id", "restarts", "breaker", "last_probe", "kv_pool",
    "load_progress", "next_maintenance", "uptime_s", "intent", "auth", "last_reason", "last_diagnosis",
    "holds_load_slot", "start_attempts", "timeouts", "companions", "base_url",
}  # fmt: skip
EVENT_KEYS = {"ts", "name", "profile", "fields"}
START_ROW_KEYS = {"ts", "profile", "outcome", "kv_tokens", "max_concurrency", "load_s", "container_id"}


def ctl(d: DaemonProc, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run supervisorctl against the daemon's socket."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_SUPERVISOR_SOCKET"}
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=False,
    )


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(proc.stdout)


def test_status_exit_codes_shapes_events_history_and_companions(
    world: World, webhook: WebhookReceiver
) -> None:
    """Exit 0 with a profile stopped on purpose, 3 while one that should run loads, 4 without a daemon;
    the status/events/history/command replies carry their keys; a companion flips 503 -> 200 in status."""
    world.profile(
        "a", extra={"companions": [{"name": "gw", "url": f"{webhook.url}/health", "interval_s": 1}]}
    )
    world.profile("b", env={"VSIM_LOAD_SECONDS": "30"}, extra={"autostart": False})
    d = world.daemon()
    d.wait_state("a", "RUNNING", 60, auth="enforced")  # the keyless check is a job of its own, after RUNNING
    d.wait_state("b", "STOPPED", 10)
    raw = d.call("status")
    assert set(raw) == {"ok", "data", "error"}
    assert set(raw["data"]["daemon"]) >= STATUS_DAEMON_KEYS
    for p in raw["data"]["profiles"]:
        assert set(p) >= STATUS_PROFILE_KEYS, STATUS_PROFILE_KEYS - set(p)
    table = ctl(d, "status")
    assert table.returncode == 0, table.stdout + table.stderr  # b is stopped on purpose
    assert "AUTH" in table.stdout
    assert "enforced" in table.stdout
    assert "load slot: free" in table.stdout
    js = ctl(d, "status", "--json")
    assert js.returncode == 0
    doc = _json(js)
    assert {p["name"]: p["intent"] for p in doc["profiles"]} == {"a": "run", "b": "stop"}
    assert doc["profiles"][0]["companions"][0]["name"] == "gw"
    # the companion: 503 shows in status and the history, 200 brings it back; no restart of a
    webhook.status = 503
    wait_for(lambda: d.status("a")["companions"][0]["status"] == 503, 20, message="companion 503 in status")
    assert d.status("a")["companions"][0]["ok"] is False
    webhook.status = 200
    wait_for(lambda: d.status("a")["companions"][0]["ok"] is True, 20, message="companion back")
    names = d.event_names("a")
    assert names.count("companion.failing") == 1
    assert names.count("companion.recovered") == 1
    assert d.status("a")["restarts"] == 0
    # b should now run: while it loads (30 s), status exits 3
    started = ctl(d, "start", "b")
    assert started.returncode == 0
    assert started.stdout.strip() == "starting"
    d.wait_state("b", "STARTING", 30)
    loading = ctl(d, "status")
    assert loading.returncode == 3, loading.stdout
    assert "load slot: b" in loading.stdout
    assert d.status("b")["holds_load_slot"] is True
    reply = d.call("stop", name="b")
    assert set(reply) == {"ok", "data", "error"}
    assert set(reply["data"]) == {"message"}
    d.wait_state("b", "STOPPED", 30)
    assert ctl(d, "status").returncode == 0
    assert ctl(d, "status", "b").returncode == 0
    # events and history, as tables and JSON, with their keys
    ev = ctl(d, "events", "a", "-n", "5", "--json")
    assert ev.returncode == 0
    events = _json(ev)
    assert len(events) == 5
    assert all(set(e) == EVENT_KEYS for e in events)
    assert "state.changed" in ctl(d, "events", "a", "-n", "100").stdout
    hist = ctl(d, "history", "a", "--json")
    assert hist.returncode == 0
    rows = _json(hist)
    assert rows[-1]["outcome"] == "ready"
    assert set(rows[-1]) >= START_ROW_KEYS
    assert "KV pool" in ctl(d, "history", "a").stdout
    d.terminate()
    gone = ctl(d, "status")
    assert gone.returncode == 4
    assert "not reachable" in gone.stderr


def test_restart_and_start_wait_follow_to_the_new_container(world: World) -> None:
    """`restart --wait` exits 0 once a NEW container is RUNNING (progress on stderr); `start --wait` on a
    running profile returns at once; stop + `start --wait` follows a fresh start; `logs -f` sees it all."""
    world.profile(env={"VSIM_LOAD_SECONDS": "3", "VSIM_SHARDS": "3"})
    d = world.daemon()
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    logs = ctl(d, "logs", "p", "-n", "3")
    assert logs.returncode == 0
    assert len(logs.stdout.splitlines()) == 3
    raw = d.call("logs", name="p", n=3)
    assert set(raw["data"]) == {"source", "container", "container_id", "lines", "cursor"}
    assert raw["data"]["container_id"] == first
    # one pipe: a new container's header (stderr) comes before its lines (stdout), both flushed per poll
    follow = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "--socket", str(d.socket), "logs", "p", "-n", "1", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(follow.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        t0 = time.monotonic()
        restart = ctl(d, "restart", "p", "--wait")
        wall = time.monotonic() - t0
        assert restart.returncode == 0, restart.stdout + restart.stderr
        assert "RUNNING after" in restart.stdout
        # the CLI polls status every 0.5 s: a drain with nothing in flight (DRAINING, then STOPPING) may end
        # between two polls, so the history proves the drain and the progress shows the states that last
        for word in ("STARTING", "RUNNING"):
            assert f"p: {word}" in restart.stderr, restart.stderr
        changes = [e["fields"]["new"] for e in d.events("p") if e["name"] == "state.changed"]
        after = changes.index("RUNNING") + 1  # the restart, from the first container's RUNNING on
        assert changes[after : after + 2] == ["DRAINING", "STOPPING"], changes
        assert "%" in restart.stderr  # load progress was shown
        second = d.status("p")["container_id"]
        assert second != first
        assert second[:12] in restart.stdout
        print(f"restart --wait wall time: {wall:.1f} s")
        already = ctl(d, "start", "p", "--wait")
        assert already.returncode == 0
        assert d.status("p")["container_id"] == second
        assert ctl(d, "stop", "p").returncode == 0
        d.wait_state("p", "STOPPED", 30)
        t0 = time.monotonic()
        start = ctl(d, "start", "p", "--wait", "--wait-timeout", "90")
        print(f"start --wait wall time: {time.monotonic() - t0:.1f} s")
        assert start.returncode == 0, start.stdout + start.stderr
        third = d.status("p")["container_id"]
        assert third not in (first, second)
        # the follower polls once a second: it shows the third container's ready line soon after the start
        header = f"--- p: container {third[:12]} ---"
        wait_for(
            lambda: (
                header in [line.strip() for line in seen]
                and any("Application startup complete" in line for line in _after(seen, header))
            ),
            30,
            message="`logs -f` to show the new container's ready line after its header",
        )
    finally:
        follow.terminate()
        follow.wait(timeout=10)
        reader.join(timeout=10)
    assert f"--- p: container {second[:12]} ---" in [line.strip() for line in seen]


def _after(lines: list[str], header: str) -> list[str]:
    """The lines printed after ``header`` (empty while it has not been printed)."""
    stripped = [line.strip() for line in list(lines)]
    return stripped[stripped.index(header) + 1 :] if header in stripped else []


def test_failed_start_wait_verdict_archived_log_and_diagnose(world: World) -> None:
    """A start that fails (CUDA OOM): `start --wait` exits 5 with the outcome and diagnosis; the log is
    archived 0600 before the next start removes the container; `logs --previous` and `diagnose
    --previous` read it; `reset` re-arms after FATAL and `restart --wait` reports FATAL."""
    world.profile(env={"VSIM_SCENARIO": "fail_oom"}, extra={"autostart": False})
    d = world.daemon(breaker_limit=2, backoff_initial_s=30.0, backoff_max_s=30.0)
    d.wait_state("p", "STOPPED", 10)
    t0 = time.monotonic()
    failed = ctl(d, "start", "p", "--wait", "--wait-timeout", "90")
    print(f"failed start --wait wall time: {time.monotonic() - t0:.1f} s")
    assert failed.returncode == 5, failed.stdout + failed.stderr
    assert "p: BACKOFF" in failed.stdout
    assert "failed_oom" in failed.stdout
    assert "diagnosis:" in failed.stdout
    cid = d.call("history", name="p", n=1)["data"]["starts"][-1]["container_id"]
    wait_for(lambda: "log.archived" in d.event_names("p"), 20, message="log.archived")
    archive_dir = world.tmp / "state" / "logs" / "p"
    assert stat.S_IMODE(archive_dir.stat().st_mode) == 0o700
    files = list(archive_dir.glob("*.log"))
    assert len(files) == 1
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert cid[:12] in files[0].name
    prev = ctl(d, "logs", "p", "--previous")
    assert prev.returncode == 0, prev.stderr
    assert "CUDA out of memory" in prev.stdout
    assert "failed_oom" in prev.stderr
    raw = d.call("logs", name="p", previous=1)
    assert set(raw["data"]) == {"source", "container", "container_id", "archive", "archives", "lines"}
    assert set(raw["data"]["archive"]) == {"file", "container_id", "at", "outcome", "dropped_bytes"}
    diag = ctl(d, "diagnose", "--container", "p", "--previous", "1", "--json")
    assert _json(diag)["vllm"]["outcome"] == "failed_oom"
    assert ctl(d, "logs", "p", "--previous", "2").returncode == 1
    # a second attempt opens the breaker: restart --wait says FATAL; reset re-arms
    fatal = ctl(d, "restart", "p", "--wait", "--wait-timeout", "90")
    assert fatal.returncode == 5, fatal.stdout + fatal.stderr
    assert "p: FATAL" in fatal.stdout
    assert "reset" in fatal.stdout
    wait_for(lambda: len(list(archive_dir.glob("*.log"))) == 2, 20, message="second archive")
    assert ctl(d, "logs", "p", "--previous", "2").returncode == 0
    refused = ctl(d, "start", "p", "--wait")
    assert refused.returncode == 1
    assert "breaker" in refused.stderr
    reset = ctl(d, "reset", "p")
    assert reset.returncode == 0, reset.stderr
    wait_for(lambda: d.status("p")["breaker"]["state"] == "closed", 10, message="breaker closed")
    # end with nothing in flight (a create/remove racing the fixture's cleanup)
    assert ctl(d, "stop", "p").returncode == 0
    d.wait_state("p", "STOPPED", 30)


def test_wait_timeout_is_reported(world: World) -> None:
    """A start slower than --timeout: exit 6 and the word timeout, while the start goes on."""
    world.profile(env={"VSIM_LOAD_SECONDS": "30"}, extra={"autostart": False})
    d = world.daemon()
    d.wait_state("p", "STOPPED", 10)
    slow = ctl(d, "start", "p", "--wait", "--wait-timeout", "3")
    assert slow.returncode == 6, slow.stdout + slow.stderr
    assert "timeout" in slow.stdout
    assert d.status("p")["state"] in ("PREFLIGHT", "WAITING", "STARTING")

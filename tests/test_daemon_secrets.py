"""No secret leaves, end to end: the real daemon, real Docker, simulator containers, the real CLI, a real
webhook receiver. Every exit is read (diff, events, history, status, logs, events.jsonl, starts.jsonl, the
daemon's own log, the chat payloads) for every secret value the profile, the container and the config hold.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.daemon_harness import DaemonProc, write_daemon_config, write_profile
from tests.harness import WebhookReceiver, free_port, wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KEY = "sk-cli-key-0f9e8d7c6b5a"  # the profile's key file and its --api-key argument
OLD = {
    "DB_PASSWD": "db-passwd-old-1a2b3c",
    "AWS_CREDENTIALS": "aws-credentials-old-4d5e6f",
    "HF_TOKEN": "hf-token-old-7a8b9c",
}
NEW = {
    "DB_PASSWD": "db-passwd-new-1a2b3c",
    "AWS_CREDENTIALS": "aws-credentials-new-4d5e6f",
    "HF_TOKEN": "hf-token-new-7a8b9c",
}
NEW_KEY = "sk-cli-key-new-5a4b3c2d1e"
HOOK_TOKEN = "hook-token-0123456789abcdef"
COMPANION_PASS = "companion-pass-93847"
COMPANION_TOKEN = "companion-token-56473"
SECRETS = (KEY, NEW_KEY, HOOK_TOKEN, COMPANION_PASS, COMPANION_TOKEN, *OLD.values(), *NEW.values())


def _ctl(d: DaemonProc, *args: str) -> subprocess.CompletedProcess[str]:
    """``supervisorctl --socket ... ARGS`` as a separate process."""
    argv = [sys.executable, "-m", "supervisor.cli", "--socket", str(d.socket), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def _args(key: str, *more: str) -> list[str]:
    return [
        "--model",
        "/models/sim",
        "--served-model-name",
        "sim-model",
        "--port",
        "8000",
        "--api-key",
        key,
        *more,
    ]


#: vLLM 0.11 prints ``--api-key`` in clear in its ``non-default args`` line (0.32 shows '***'): the server's
#: own log then holds the key, and the masking of what reaches us is really tested.
PRINTS_KEY = {"VSIM_FLAVOR": "v0_11"}


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_secret_reaches_diff_events_history_logs_or_chat(world: World, webhook: WebhookReceiver) -> None:
    """DB_PASSWD, AWS_CREDENTIALS, HF_TOKEN, --api-key, a webhook token and a companion's URL secrets:
    drift after a reload, a failing change's alert with its diff, a failing companion; no exit shows one."""
    (world.tmp / "p.key").write_text(KEY + "\n", encoding="utf-8")
    (world.tmp / "p.key").chmod(0o600)
    dead = f"http://user:{COMPANION_PASS}@127.0.0.1:{free_port()}/ready?token={COMPANION_TOKEN}"
    spec = world.profile(
        env={**OLD, **PRINTS_KEY},
        args=_args(KEY),
        extra={
            "rollback_after": 1,
            "on_failed_change": "hold",
            "companions": [{"name": "gw", "url": dead, "interval_s": 1, "timeout_s": 1}],
        },
    )
    channels = [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/{HOOK_TOKEN}"}]
    d = world.daemon(breaker_limit=5, extra={"alerts": {"channels": channels}})
    first = d.wait_state("p", "RUNNING", 60)["container_id"]
    d._wait_status("p", lambda s: s["last_known_good"]["fingerprint"] is not None, 20, "last good saved")
    assert f"DB_PASSWD={OLD['DB_PASSWD']}" in world.container().attrs["Config"]["Env"]  # really there

    # the operator edits every secret, the command's key and one plain flag: the container now drifts
    spec.env = {**NEW, **PRINTS_KEY, "VSIM_SCENARIO": "fail_engine_init"}
    spec.args = _args(NEW_KEY, "--seed", "7")
    write_daemon_config(
        world.tmp,
        [write_profile(world.tmp, spec, world.res.test_id)],
        breaker_limit=5,
        extra={"alerts": {"channels": channels}},
    )
    assert d.call("reload")["ok"]
    st = d._wait_status("p", lambda s: bool(s["drift"]), 30, "drift marked")
    assert st["drift"] == ["command", "env"]
    diff = _ctl(d, "diff", "p")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    for name in OLD:
        assert f"env {name}: profile <secret>, container <secret>" in diff.stdout
    assert "--api-key" in diff.stdout
    assert "--seed" in diff.stdout

    # the edit fails to start: rollback_after 1 + hold alerts with the diff against the last known good
    assert d.call("restart", name="p")["ok"]
    wait_for(lambda: d.status("p")["container_id"] != first, 30, message="restarted")
    wait_for(
        lambda: any("config.change_failed" in r.body.decode() for r in webhook.received()),
        90,
        message="the failing change's alert",
    )
    wait_for(lambda: "companion.failing" in d.event_names("p"), 30, message="companion failing")
    wait_for(lambda: webhook.received() and "companion" in str([r.body for r in webhook.received()]), 30)

    payloads = "\n".join(r.body.decode("utf-8") for r in webhook.received())
    assert "env DB_PASSWD" in payloads  # the diff really is in the alert, masked
    events_cli = _ctl(d, "events", "p", "-n", "500")
    history_cli = _ctl(d, "history", "p")
    status_json = _ctl(d, "status", "--json")
    logs_cli = _ctl(d, "logs", "p")
    assert "container.drift" in events_cli.stdout
    assert "<secret>" in events_cli.stdout + str(d.events("p"))
    state = world.tmp / "state"
    exits = {
        "diff": diff.stdout + diff.stderr,
        "events": events_cli.stdout + events_cli.stderr,
        "events (API)": str(d.events()),
        "history": history_cli.stdout + history_cli.stderr,
        "status": status_json.stdout,
        "logs": logs_cli.stdout,
        "events.jsonl": (state / "events.jsonl").read_text(encoding="utf-8"),
        "starts.jsonl": (state / "starts.jsonl").read_text(encoding="utf-8"),
        "daemon log": d.log_path.read_text(encoding="utf-8", errors="replace"),
        "webhook": payloads,
    }
    assert {where: _leaks(text) for where, text in exits.items() if _leaks(text)} == {}


def test_shm_size_stated_as_dockers_default_is_no_drift(world: World) -> None:
    """``shm_size: 64m`` (and ipc private, runtime runc, written out) is what Docker reports as unset:
    ``diff`` (the drift check's own comparison) finds nothing; 128m is still drift."""
    spec = world.profile(extra_container={"shm_size": "64m", "ipc_mode": "private", "runtime": "runc"})
    d = world.daemon()
    d.wait_state("p", "RUNNING", 60)
    host = world.container().attrs["HostConfig"]
    assert (host["ShmSize"], host["IpcMode"], host["Runtime"]) == (64 * 1024 * 1024, "private", "runc")
    out = _ctl(d, "diff", "p")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "matches" in out.stdout
    spec.extra_container = {**spec.extra_container, "shm_size": "128m"}
    write_daemon_config(world.tmp, [write_profile(world.tmp, spec, world.res.test_id)])
    assert d.call("reload")["ok"]
    st = d._wait_status("p", lambda s: bool(s["drift"]), 30, "drift marked")
    assert st["drift"] == ["resources"]
    assert "shm_size: profile 134217728, container None" in _ctl(d, "diff", "p").stdout

"""Last known good end to end: the real daemon, real Docker, the simulator, `reload`, a real webhook."""

from __future__ import annotations

import stat
from typing import Any

import pytest

from tests.daemon_harness import DaemonProc, ProfileSpec, sim_args, write_profile
from tests.harness import WebhookReceiver, wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET_OLD = "hf-old-secret-value"
SECRET_NEW = "hf-new-secret-value"


def _alerts(webhook: WebhookReceiver) -> list[dict[str, Any]]:
    return [r.json() for r in webhook.received() if r.path.startswith("/alert/")]


def _setup(world: World, webhook: WebhookReceiver, policy: str, breaker_limit: int) -> tuple[DaemonProc, str]:
    """A profile that runs; its last known good saved (0600); then edited to a config that fails to start
    (the simulator's startup failure knob, a new secret, a new flag) and reloaded; then restarted."""
    spec = world.profile(
        env={"HF_TOKEN": SECRET_OLD}, extra={"rollback_after": 2, "on_failed_change": policy}
    )
    channels = [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]
    d = world.daemon(breaker_limit=breaker_limit, extra={"alerts": {"channels": channels}})
    st = d.wait_state("p", "RUNNING", 60)
    good = d._wait_status("p", lambda s: s["last_known_good"]["fingerprint"] is not None, 20, "saved")
    assert good["running_spec"] == "profile"
    fingerprint = str(good["last_known_good"]["fingerprint"])
    path = world.tmp / "state" / "p.last_good.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert SECRET_OLD in path.read_text(encoding="utf-8")  # the spec as created (hence 0600)

    _edit(world, spec)
    reply = d.call("reload")
    assert reply["ok"], reply
    assert d.call("restart", name="p")["ok"]  # a reload never bounces: the restart creates the edit
    wait_for(lambda: d.status("p")["container_id"] != st["container_id"], 30, message="restarted")
    return d, fingerprint


def _edit(world: World, spec: ProfileSpec) -> None:
    """The operator's edit: the startup failure knob, a new secret value, one more flag."""
    spec.env.update({"HF_TOKEN": SECRET_NEW, "VSIM_SCENARIO": "fail_engine_init"})
    spec.args = sim_args()
    spec.args += ["--seed", "7"]
    write_profile(world.tmp, spec, world.res.test_id)


def _check_diff_alert(alert: dict[str, Any]) -> None:
    assert "last known good differs in: command, env HF_TOKEN, env VSIM_SCENARIO" in alert["reason"]
    text = str(alert)
    assert SECRET_NEW not in text
    assert SECRET_OLD not in text
    assert alert["details"]["env VSIM_SCENARIO"] == "new 'fail_engine_init', last known good (unset)"
    assert alert["details"]["env HF_TOKEN"] == "new <secret>, last known good <secret>"


def test_rollback_starts_the_last_known_good_after_two_failed_starts(
    world: World, webhook: WebhookReceiver
) -> None:
    """rollback_after 2, rollback: two failed starts of the edited config, then the last known good is
    created and reaches RUNNING; the alert with the (masked) diff reaches the webhook."""
    d, fingerprint = _setup(world, webhook, "rollback", breaker_limit=4)
    st = d._wait_status(
        "p", lambda s: s["state"] == "RUNNING" and s["running_spec"] == "last_known_good", 90, "rolled back"
    )
    assert st["last_known_good"]["next_start"] is True
    assert st["kv_pool"]["fingerprint"] == fingerprint  # the same config as the last known good
    env = world.container().attrs["Config"]["Env"]
    assert f"HF_TOKEN={SECRET_OLD}" in env
    assert not any(e.startswith("VSIM_SCENARIO=") for e in env)
    assert world.container().attrs["Config"]["Image"].startswith("sha256:")  # pinned by id

    rows = d.call("history", name="p", n=10)["data"]["starts"]
    assert [r["outcome"] for r in rows][-4:] == ["ready", "failed_engine_init", "failed_engine_init", "ready"]
    names = [e["name"] for e in d.events("p")]
    assert names.index("config.change_failed") < names.index("last_good.start")
    got = wait_for(
        lambda: [a for a in _alerts(webhook) if "rolling back" in a["title"]], 20, message="rollback alert"
    )
    assert got[0]["title"] == "the new config failed 2 times: rolling back to the last known good"
    assert got[0]["severity"] == "warning"
    _check_diff_alert(got[0])
    assert SECRET_NEW not in d.log_tail(100_000)


def test_hold_alerts_and_keeps_retrying_the_new_config(world: World, webhook: WebhookReceiver) -> None:
    """on_failed_change hold: after two failed starts only an alert (it says the new config is kept: the
    breaker, not this alert, decides whether retries go on); the third start is again the edited config;
    nothing from the last known good is created."""
    d, _ = _setup(world, webhook, "hold", breaker_limit=6)
    got = wait_for(lambda: [a for a in _alerts(webhook) if "holding" in a["title"]], 60, message="hold alert")
    assert got[0]["title"] == "the new config failed 2 times; holding it (on_failed_change: hold)"
    assert got[0]["severity"] == "critical"
    assert got[0]["reason"].endswith("the new config is kept (on_failed_change: hold)")
    _check_diff_alert(got[0])
    st = d._wait_status("p", lambda s: s["last_known_good"]["changed_failures"] >= 3, 60, "third failure")
    assert st["running_spec"] == "profile"
    assert st["state"] in ("BACKOFF", "PREFLIGHT", "WAITING", "STARTING", "STOPPING")
    assert "last_good.start" not in [e["name"] for e in d.events("p")]
    assert len([a for a in _alerts(webhook) if "holding" in a["title"]]) == 1  # once per streak

"""The OnFailure= alert (supervisorctl unit-failed) against a real webhook receiver on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from supervisor.offline.alerts import failure_message, run_unit_failed_alert
from tests.harness import WebhookReceiver

MONITOR = {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": "2"}


def _config(tmp_path: Path, url: str, rest: str = "") -> Path:
    fd = os.open(tmp_path / "alert.url", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(url + "\n")
    path = tmp_path / "daemon.yaml"
    path.write_text(
        "alerts:\n  channels:\n"
        f"    - {{kind: generic, name: local, url_file: {tmp_path / 'alert.url'}}}\n" + rest,
        encoding="utf-8",
    )
    return path


def test_failure_message_carries_systemd_outcome() -> None:
    """The MONITOR_* variables systemd sets become details; the message is critical and names the unit."""
    msg = failure_message("vllm-supervisor.service", MONITOR, "box", 1000.0)
    assert msg.severity == "critical"
    assert msg.new_state == "failed"
    assert "(exit-code)" in msg.reason
    assert "journalctl -u vllm-supervisor.service" in msg.reason
    assert dict(msg.details) == {"result": "exit-code", "exit code": "exited", "exit status": "2"}
    assert failure_message("u.service", {}, "box", 1.0).details == ()


def test_alert_sent_although_the_rest_of_the_config_is_broken(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    """Only alerts: is read: a bad key elsewhere (why the daemon died) does not silence the alert."""
    path = _config(tmp_path, webhook.url + "/hook", "log_level: loud\nprofiles: [missing.yaml]\n")
    code, text = run_unit_failed_alert(path, "vllm-supervisor.service", MONITOR)
    assert code == 0, text
    assert text.startswith("ok   generic  local")
    (req,) = webhook.wait_for_count(1)
    body = req.json()
    assert (req.path, body["profile"], body["severity"]) == ("/hook", "vllm-supervisor.service", "critical")
    assert body["details"]["exit status"] == "2"


def test_language_from_the_alerts_section(tmp_path: Path, webhook: WebhookReceiver) -> None:
    """alerts.language zh renders the message in Chinese; a bad language is reported and the alert still
    goes out, in English."""
    zh = _config(tmp_path, webhook.url + "/hook", "  language: zh\n")
    code, text = run_unit_failed_alert(zh, "vllm-supervisor.service", MONITOR)
    assert code == 0, text
    body = webhook.wait_for_count(1)[0].json()
    assert body["title"] == "supervisor daemon down: systemd gave up restarting it"
    assert body["display_title"] == "监管守护进程宕机：systemd 已放弃重启"
    assert "systemctl restart vllm-supervisor.service" in body["todo"]
    assert "退出状态：2" in body["text"]
    (tmp_path / "alert.url").unlink()
    bad = _config(tmp_path, webhook.url + "/hook", "  language: fr\n")
    code, text = run_unit_failed_alert(bad, "vllm-supervisor.service", MONITOR)
    assert code == 0, text
    assert "alerts.language" in text.splitlines()[0]
    body = webhook.wait_for_count(2)[1].json()
    assert (body["language"], body["display_title"]) == ("en", body["title"])


def test_cli_exit_codes(tmp_path: Path, webhook: WebhookReceiver) -> None:
    """supervisorctl unit-failed: 0 delivered, 1 a channel refused, 2 no channel; the URL is never printed."""
    path = _config(tmp_path, webhook.url + "/secret-token-path")

    def run(config: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "supervisor.cli", "unit-failed", "x.service", "--config", str(config)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    ok = run(path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    webhook.status = 403
    refused = run(path)
    assert refused.returncode == 1
    assert "secret-token-path" not in ok.stdout + ok.stderr + refused.stdout + refused.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("log_level: info\n", encoding="utf-8")
    none = run(empty)
    assert none.returncode == 2
    assert "no usable alert channel" in none.stdout

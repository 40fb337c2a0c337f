"""The heartbeat's failure pings and the digest's config keys: parsing (errors name file, key and value;
secrets never shown) and the failure URL a real receiver on 127.0.0.1 gets."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import structlog

from supervisor.adapters.alerts.heartbeat import FLIP_GAP_S, Heartbeat, with_path
from supervisor.config import check_config, cli_check_config, load_config
from supervisor.config.model import HeartbeatConfig
from supervisor.core.clock import FakeClock
from tests.harness import WebhookReceiver

TOKEN = "hb-TOKEN-9f8e7d-DO-NOT-LEAK"


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


# ---- config -----------------------------------------------------------------------------------------


def test_defaults(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path / "d.yaml", "heartbeat: {url: 'https://hc-ping.com/x'}\n"))
    hb = cfg.heartbeat
    assert (hb.fail_after_s, hb.fail_path, hb.fail_url, hb.fail_url_file) == (1800.0, "/fail", None, None)
    assert hb.fails
    assert cfg.alerts.digest_at is None


def test_keys_are_read(tmp_path: Path) -> None:
    _write(tmp_path / "fail.url", f"https://kuma/api/push/{TOKEN}?status=down\n", 0o600)
    cfg = load_config(
        _write(
            tmp_path / "d.yaml",
            "heartbeat:\n  url: 'https://kuma/api/push/x?status=up'\n  fail_after_s: 600\n"
            "  fail_url_file: fail.url\nalerts:\n  digest_at: '08:30'\n",
        )
    )
    assert cfg.heartbeat.fail_after_s == 600.0
    assert cfg.heartbeat.fail_url_file == tmp_path / "fail.url"
    assert cfg.alerts.digest_at == "08:30"
    off = load_config(_write(tmp_path / "e.yaml", "heartbeat:\n  url: 'https://h/x'\n  fail_path: ''\n"))
    assert off.heartbeat.fail_path == ""
    assert not off.heartbeat.fails


def test_errors_name_file_key_and_value_and_hide_secrets(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "d.yaml",
        "heartbeat:\n  url: 'https://h/x'\n  fail_after_s: 0\n  fail_path: fail\n"
        f"  fail_url: 'ftp://h/{TOKEN}'\nalerts:\n  digest_at: '9:00'\n",
    )
    problems = {p.key_path: p for p in check_config(f)}
    assert set(problems) == {
        "heartbeat.fail_after_s",
        "heartbeat.fail_path",
        "heartbeat.fail_url",
        "alerts.digest_at",
    }
    assert problems["alerts.digest_at"].message == "must be a 24-hour local time HH:MM, e.g. '09:00'"
    assert problems["alerts.digest_at"].value == "'9:00'"
    assert problems["heartbeat.fail_path"].value == "'fail'"
    assert "must start with '/'" in problems["heartbeat.fail_path"].message
    buf = io.StringIO()
    assert cli_check_config(f, buf) == 1
    out = buf.getvalue()
    assert f"{f}: alerts.digest_at: must be a 24-hour local time HH:MM" in out
    assert TOKEN not in out


def test_fail_url_and_fail_url_file_exclude_each_other(tmp_path: Path) -> None:
    _write(tmp_path / "fail.url", "https://h/f\n", 0o600)
    f = _write(
        tmp_path / "d.yaml",
        "heartbeat:\n  url: https://h/x\n  fail_url: https://h/y\n  fail_url_file: fail.url\n",
    )
    (problem,) = check_config(f)
    assert problem.message == "set only one of 'fail_url' and 'fail_url_file'"


# ---- the failure URL --------------------------------------------------------------------------------


def test_with_path_keeps_query_and_fragment() -> None:
    assert with_path("https://hc-ping.com/abc", "/fail") == "https://hc-ping.com/abc/fail"
    assert with_path("https://hc-ping.com/abc/?rid=1#x", "/fail") == "https://hc-ping.com/abc/fail?rid=1#x"


def test_failing_pings_go_to_url_plus_fail_path(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    hb = Heartbeat(HeartbeatConfig(url=f"{webhook.url}/ping/{TOKEN}", interval_s=300.0), fake_clock)
    with structlog.testing.capture_logs() as logs:
        assert hb.beat("p FATAL", failing=True)
        assert hb.beat("all well", failing=False)
    assert [(r.method, r.path, r.body) for r in webhook.received()] == [
        ("POST", f"/ping/{TOKEN}/fail", b"p FATAL"),
        ("POST", f"/ping/{TOKEN}", b"all well"),
    ]
    assert TOKEN not in json.dumps(logs)


def test_a_fail_url_file_wins_over_the_path(
    webhook: WebhookReceiver, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """Uptime Kuma: the same push token with ?status=down, from a 0600 file."""
    fail = _write(tmp_path / "fail.url", f"{webhook.url}/api/push/{TOKEN}?status=down\n", 0o600)
    cfg = HeartbeatConfig(url=f"{webhook.url}/api/push/{TOKEN}?status=up", fail_url_file=fail)
    hb = Heartbeat(cfg, fake_clock)
    assert hb.beat("down", failing=True)
    assert hb.beat("up")
    assert [r.path for r in webhook.received()] == [
        f"/api/push/{TOKEN}?status=down",
        f"/api/push/{TOKEN}?status=up",
    ]


def test_no_failure_pings_when_disabled(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """fail_path '' and no fail_url: failures go to the normal URL (the body says why) and a flip of the
    verdict does not make a ping due early."""
    hb = Heartbeat(HeartbeatConfig(url=f"{webhook.url}/p", fail_path=""), fake_clock)
    assert hb.beat("p FATAL", failing=True)
    assert [r.path for r in webhook.received()] == ["/p"]
    fake_clock.advance(FLIP_GAP_S)
    assert not hb.due(failing=False)


def test_a_verdict_flip_makes_a_ping_due_at_once(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    hb = Heartbeat(HeartbeatConfig(url=f"{webhook.url}/p", interval_s=300.0), fake_clock)
    assert hb.beat("ok", failing=False)
    assert not hb.due(failing=False)
    assert not hb.due(failing=True)  # not sooner than FLIP_GAP_S after the last ping
    fake_clock.advance(FLIP_GAP_S)
    assert hb.due(failing=True)
    assert not hb.due(failing=False)

"""supervisor.adapters.alerts.sender against real HTTP receivers on 127.0.0.1 (no mocks of requests)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import structlog

from supervisor.adapters.alerts.heartbeat import Heartbeat
from supervisor.adapters.alerts.sender import AlertSender
from supervisor.config.model import AlertChannel, AlertsConfig, DaemonConfig, HeartbeatConfig
from supervisor.core.actions import Alert
from supervisor.core.alerts.message import AlertMessage
from supervisor.core.alerts.payloads import feishu_sign
from supervisor.core.clock import FakeClock
from supervisor.offline.alerts import run_test_alert
from tests.harness import WebhookReceiver, free_port, wait_for, webhook_receiver

TOKEN = "tok-SECRET-5f1c9a"
SIGNING = "sig-SECRET-77ab20"


def _msg(profile: str = "qwen", reason: str = "5 probes failed", severity: str = "critical") -> AlertMessage:
    return AlertMessage(profile, severity, "emergency stop", "DEGRADED", "BACKOFF", reason, "thor", 1.79e9)


def _notifier(channels: tuple[AlertChannel, ...], clock: FakeClock, **kw: object) -> AlertSender:
    kw.setdefault("backoff_s", (0.01,))
    return AlertSender(channels, 900.0, clock, 5.0, host="thor", **kw)  # type: ignore[arg-type]


def _generic(recv: WebhookReceiver, name: str = "hook") -> AlertChannel:
    return AlertChannel(kind="generic", name=name, url=f"{recv.url}/generic/{TOKEN}")


# ---- delivery ---------------------------------------------------------------------------------------


def test_send_delivers_to_every_channel(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """One send reaches every channel with its platform's body, in the background."""
    channels = (
        _generic(webhook),
        AlertChannel(kind="slack", name="ops", url=f"{webhook.url}/slack"),
        AlertChannel(kind="telegram", name="tg", url=f"{webhook.url}/botX/sendMessage", chat_id="42"),
    )
    n = _notifier(channels, fake_clock)
    assert n.send(_msg())
    got = webhook.wait_for_count(3)
    assert n.close(5)
    by_path = {r.path: r for r in got}
    assert by_path[f"/generic/{TOKEN}"].json()["reason"] == "5 probes failed"
    assert by_path["/slack"].json()["attachments"][0]["color"] == "#E01E5A"
    assert by_path["/botX/sendMessage"].json()["chat_id"] == "42"
    assert all(r.method == "POST" for r in got)
    assert all(r.headers["content-type"] == "application/json" for r in got)


def test_alert_builds_message_with_host_and_clock_time(
    webhook: WebhookReceiver, fake_clock: FakeClock
) -> None:
    """AlertSender.alert turns a state machine Alert into a message stamped with host and now()."""
    n = _notifier((_generic(webhook),), fake_clock)
    assert n.alert("qwen", Alert("warning", "probe failing", "RUNNING", "DEGRADED", "2/5"), diagnosis="d")
    (req,) = webhook.wait_for_count(1)
    n.close(5)
    body = req.json()
    assert (body["host"], body["at"], body["diagnosis"]) == ("thor", fake_clock.now(), "d")
    assert (body["old_state"], body["new_state"], body["severity"]) == ("RUNNING", "DEGRADED", "warning")


def test_language_zh_renders_the_catalogue_message(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """alerts.language zh: the card is in Chinese (title, labels, what to do), the English title stays in
    the generic payload's ``title`` and the evidence (reason) stays verbatim."""
    channels = (_generic(webhook), AlertChannel(kind="feishu", name="fs", url=f"{webhook.url}/feishu"))
    n = _notifier(channels, fake_clock, language="zh")
    title = "circuit breaker open: not restarting"
    alert = Alert("critical", title, "BACKOFF", "FATAL", "3 failures", kind="breaker.open")
    assert n.alert("qwen", alert, diagnosis="d")
    got = {r.path: r.json() for r in webhook.wait_for_count(2)}
    n.close(5)
    generic = got[f"/generic/{TOKEN}"]
    assert generic["title"] == "circuit breaker open: not restarting"
    assert generic["display_title"] == "熔断器已打开：不再自动重启"
    assert "原因：3 failures" in generic["text"]
    card = got["/feishu"]["card"]
    assert card["header"]["title"]["content"] == "[thor] qwen: 熔断器已打开：不再自动重启"
    assert (
        card["elements"][1]["text"]["content"]
        == "👉 处理建议：按诊断排除故障后执行：supervisorctl reset qwen"
    )


def test_feishu_signature_sent_verifies(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """A signed Feishu channel sends timestamp (the clock's second) and the matching sign."""
    ch = AlertChannel(kind="feishu", name="fs", url=f"{webhook.url}/hook", secret=SIGNING)
    webhook.response_body = b'{"code":0,"msg":"success","data":{}}'
    (res,) = _notifier((ch,), fake_clock).test(fake_clock.now())
    assert res.ok
    body = webhook.received()[0].json()
    assert body["timestamp"] == str(int(fake_clock.now()))
    assert body["sign"] == feishu_sign(int(fake_clock.now()), SIGNING)


def test_url_file_read_at_send_time(webhook: WebhookReceiver, fake_clock: FakeClock, tmp_path: Path) -> None:
    """A channel whose URL lives in a 0600 file uses the file's current content."""
    path = tmp_path / "url"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, f"{webhook.url}/from-file\n".encode())
    os.close(fd)
    ch = AlertChannel(kind="generic", name="f", url_file=path)
    (res,) = _notifier((ch,), fake_clock).test(fake_clock.now())
    assert res.ok
    assert webhook.received()[0].path == "/from-file"


# ---- retries ----------------------------------------------------------------------------------------


def test_retry_on_500_then_success(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """A 500 is transient: retried after the backoff, and the second try succeeds."""
    webhook.status = 500
    delays: list[float] = []

    def recover(delay: float) -> None:  # the backoff pause: the receiver recovers meanwhile
        delays.append(delay)
        webhook.status = 200

    n = _notifier((_generic(webhook),), fake_clock, sleep=recover, backoff_s=(1.5, 4.0))
    with structlog.testing.capture_logs() as logs:
        assert n.send(_msg())
        assert n.flush(10)
    assert [r.path for r in webhook.received()] == [f"/generic/{TOKEN}"] * 2
    assert delays == [1.5]
    events = [e["event"] for e in logs]
    assert events == ["alert.retry", "alert.sent"]
    n.close(5)


def test_429_and_5xx_retried_up_to_three_tries_with_capped_backoff(
    webhook: WebhookReceiver, fake_clock: FakeClock
) -> None:
    """A channel that keeps answering 429 gets 3 tries in all, the pauses capped at max_backoff_s."""
    webhook.status = 429
    delays: list[float] = []
    n = _notifier(
        (_generic(webhook),), fake_clock, sleep=delays.append, backoff_s=(1.0, 60.0), max_backoff_s=7.0
    )
    (res,) = n.test(fake_clock.now())
    assert not res.ok
    assert res.detail == "HTTP 429"
    assert len(webhook.received()) == 3
    assert delays == [1.0, 7.0]


def test_no_retry_on_400(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """A 400 is permanent: one request, one alert.failed event, no retry."""
    webhook.status = 400
    n = _notifier((_generic(webhook),), fake_clock, sleep=lambda _d: pytest.fail("must not back off"))
    with structlog.testing.capture_logs() as logs:
        (res,) = n.test(fake_clock.now())
    assert (res.ok, res.detail) == (False, "HTTP 400")
    assert len(webhook.received()) == 1
    (event,) = logs
    assert event["event"] == "alert.failed"
    assert (event["transient"], event["attempts"], event["status"]) == (False, 1, 400)


@pytest.mark.parametrize(
    ("kind", "answer", "detail"),
    [
        ("feishu", {"code": 19021, "msg": "sign match fail"}, "feishu error 19021"),
        ("dingtalk", {"errcode": 310000, "errmsg": "sign not match"}, "dingtalk error 310000"),
        ("wecom", {"errcode": 93000, "errmsg": "invalid webhook url"}, "wecom error 93000"),
        ("telegram", {"ok": False, "error_code": 400, "description": "chat not found"}, "telegram error 400"),
    ],
)
def test_platform_error_code_in_200_is_a_failure(
    webhook: WebhookReceiver, fake_clock: FakeClock, kind: str, answer: dict[str, object], detail: str
) -> None:
    """HTTP 200 with the platform's own error code counts as a (permanent) failure."""
    webhook.response_body = json.dumps(answer).encode()
    ch = AlertChannel(kind=kind, name=kind, url=f"{webhook.url}/x", chat_id="1")  # type: ignore[arg-type]
    (res,) = _notifier((ch,), fake_clock, sleep=lambda _d: pytest.fail("no retry")).test(fake_clock.now())
    assert not res.ok
    assert res.detail.startswith(f"HTTP 200, {detail}")
    assert len(webhook.received()) == 1


def test_platform_success_codes_are_ok(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """errcode 0 / code 0 / ok:true are successes."""
    for kind, answer in (("dingtalk", {"errcode": 0, "errmsg": "ok"}), ("telegram", {"ok": True})):
        webhook.response_body = json.dumps(answer).encode()
        ch = AlertChannel(kind=kind, name=kind, url=f"{webhook.url}/x", chat_id="1")  # type: ignore[arg-type]
        (res,) = _notifier((ch,), fake_clock).test(fake_clock.now())
        assert res.ok, kind


def test_platform_rate_limit_code_is_retried(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """DingTalk's "sending too fast" code in a 200 is transient: retried."""
    webhook.response_body = b'{"errcode":130101,"errmsg":"send too fast"}'
    ch = AlertChannel(kind="dingtalk", name="dt", url=f"{webhook.url}/robot/send?access_token=t")
    (res,) = _notifier((ch,), fake_clock, sleep=lambda _d: None).test(fake_clock.now())
    assert not res.ok
    assert len(webhook.received()) == 3


def test_connection_refused_is_transient_and_reported_without_url(fake_clock: FakeClock) -> None:
    """Nothing listening: retried, then reported as "connection error" (no URL in the detail)."""
    ch = AlertChannel(kind="generic", name="gone", url=f"http://127.0.0.1:{free_port()}/{TOKEN}")
    tries: list[float] = []
    (res,) = _notifier((ch,), fake_clock, sleep=tries.append).test(fake_clock.now())
    assert (res.ok, res.detail, len(tries)) == (False, "connection error", 2)


# ---- queue ------------------------------------------------------------------------------------------


def test_queue_overflow_drops_oldest(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """With the sender stuck, a full queue drops its oldest message and says so."""
    webhook.status = 500
    release = threading.Event()
    in_backoff = threading.Event()

    def stuck(_delay: float) -> None:
        in_backoff.set()
        release.wait(10)
        webhook.status = 200

    n = _notifier((_generic(webhook),), fake_clock, sleep=stuck, max_queue=3)
    with structlog.testing.capture_logs() as logs:
        assert n.send(_msg("p0"))
        assert in_backoff.wait(10)
        for i in range(1, 6):
            assert n.send(_msg(f"p{i}"))
        assert n.pending() == 4  # 3 queued + 1 being sent
        release.set()
        assert n.close(10)
    overflow = [e for e in logs if e["event"] == "alert.queue_overflow"]
    assert [e["dropped_profile"] for e in overflow] == ["p1", "p2"]
    delivered = [r.json()["profile"] for r in webhook.received() if r.path.startswith("/generic")]
    assert delivered == ["p0", "p0", "p3", "p4", "p5"]  # p0 tried twice (500 then 200)


def test_close_flushes_queue_and_refuses_new(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """close() waits until every queued message went out; later sends are refused."""
    n = _notifier((_generic(webhook),), fake_clock)
    for i in range(4):
        assert n.send(_msg(f"p{i}"))
    assert n.close(10)
    assert sorted(r.json()["profile"] for r in webhook.received()) == ["p0", "p1", "p2", "p3"]
    assert not n.send(_msg("late"))
    assert n.pending() == 0


def test_duplicate_dropped_by_notifier(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """An identical alert within dedupe_s is not sent again; after the window it is, with a count."""
    n = _notifier((_generic(webhook),), fake_clock)
    assert n.send(_msg())
    assert not n.send(_msg())
    fake_clock.advance(901)
    assert n.send(_msg())
    assert n.close(10)
    bodies = [r.json() for r in webhook.received()]
    assert len(bodies) == 2
    assert bodies[1]["details"] == {"repeats suppressed": "1"}


# ---- secrets ----------------------------------------------------------------------------------------


def test_secrets_never_in_logs_results_or_output(
    fake_clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """URL tokens and signing secrets appear in no log event, result or printed text, whatever happens."""
    with webhook_receiver() as ok_recv, webhook_receiver(status=400) as bad_recv, webhook_receiver() as echo:
        echo.response_body = json.dumps(
            {"errcode": 300001, "errmsg": f"token {TOKEN} sign {SIGNING}"}
        ).encode()
        channels = (
            AlertChannel(
                kind="dingtalk", name="ok", url=f"{ok_recv.url}/send?access_token={TOKEN}", secret=SIGNING
            ),
            AlertChannel(kind="feishu", name="bad", url=f"{bad_recv.url}/hook/{TOKEN}", secret=SIGNING),
            AlertChannel(
                kind="dingtalk", name="echo", url=f"{echo.url}/send?access_token={TOKEN}", secret=SIGNING
            ),
            AlertChannel(
                kind="telegram", name="down", url=f"http://127.0.0.1:{free_port()}/bot{TOKEN}/x", chat_id="1"
            ),
        )
        n = _notifier(channels, fake_clock, sleep=lambda _d: None)
        with structlog.testing.capture_logs() as logs:
            results = n.test(fake_clock.now())
            assert n.send(_msg())
            assert n.close(10)
        assert [r.ok for r in results] == [True, False, False, False]
        assert TOKEN in ok_recv.received()[0].path  # the token was really used
        assert results[2].detail.startswith("HTTP 200, dingtalk error 300001: token <secret> sign <secret>")
        cfg = _config(channels)
        code, text = run_test_alert(cfg)
        print(text)
    everything = json.dumps(logs, default=str) + repr(results) + text + repr(channels) + repr(cfg)
    out = capsys.readouterr()
    for secret in (TOKEN, SIGNING):
        assert secret not in everything
        assert secret not in out.out + out.err
    assert code == 1


# ---- test-alert -------------------------------------------------------------------------------------


def _config(channels: tuple[AlertChannel, ...]) -> DaemonConfig:
    return DaemonConfig(
        path=Path("/etc/vllm-supervisor/daemon.yaml"),
        state_dir=Path("/nonexistent/state"),
        socket_path=Path("/nonexistent/sock"),
        restore_dir=Path("/nonexistent/restore"),
        alerts=AlertsConfig(channels=channels),
    )


def test_run_test_alert_exit_codes(webhook: WebhookReceiver) -> None:
    """0 when every channel accepts, 1 when one fails, 2 when none is configured; one line per channel."""
    good = _generic(webhook, "good")
    code, text = run_test_alert(_config((good,)))
    assert (code, text) == (0, "ok   generic  good: HTTP 200")
    assert webhook.received()[0].json()["title"] == "test alert"
    with webhook_receiver(status=404) as missing:
        bad = AlertChannel(kind="slack", name="gone", url=f"{missing.url}/services/x")
        code, text = run_test_alert(_config((good, bad)))
    assert code == 1
    assert text.splitlines() == ["ok   generic  good: HTTP 200", "FAIL slack    gone: HTTP 404"]
    code, text = run_test_alert(_config(()))
    assert code == 2
    assert "no alert channels" in text


def test_run_test_alert_reports_unconfigured_channel() -> None:
    """A channel with an empty url_file or no chat_id fails with a clear line, no request made."""
    code, text = run_test_alert(
        _config((AlertChannel(kind="telegram", name="t", url="http://127.0.0.1:9/x"),))
    )
    assert (code, text) == (1, "FAIL telegram t: no chat_id configured")


# ---- heartbeat --------------------------------------------------------------------------------------


def test_heartbeat_pings_with_summary_and_schedules(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """beat() POSTs the summary to the ping URL; due() again only after interval_s."""
    hb = Heartbeat(HeartbeatConfig(url=f"{webhook.url}/ping/{TOKEN}", interval_s=300.0), fake_clock)
    assert hb.due()
    with structlog.testing.capture_logs() as logs:
        assert hb.beat("qwen RUNNING 3d; gemma RUNNING 1h")
    (req,) = webhook.received()
    assert (req.method, req.path) == ("POST", f"/ping/{TOKEN}")
    assert req.body.decode() == "qwen RUNNING 3d; gemma RUNNING 1h"
    assert req.headers["content-type"].startswith("text/plain")
    assert not hb.due()
    fake_clock.advance(299)
    assert not hb.due()
    fake_clock.advance(1)
    assert hb.due()
    assert [e["event"] for e in logs] == ["heartbeat.sent"]
    assert TOKEN not in json.dumps(logs)


def test_heartbeat_failure_retries_sooner(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """A failed ping (500, tried twice) returns False and is due again after retry_s, not interval_s."""
    webhook.status = 500
    hb = Heartbeat(HeartbeatConfig(url=f"{webhook.url}/ping", interval_s=3600.0), fake_clock, retry_s=60.0)
    assert not hb.beat("x")
    assert len(webhook.received()) == 2
    fake_clock.advance(59)
    assert not hb.due()
    fake_clock.advance(1)
    assert hb.due()
    webhook.status = 200
    assert hb.beat("x")
    fake_clock.advance(60)
    assert not hb.due()


def test_heartbeat_disabled_never_due(fake_clock: FakeClock) -> None:
    """Without a URL the heartbeat is never due."""
    hb = Heartbeat(HeartbeatConfig(), fake_clock)
    assert not hb.enabled
    assert not hb.due()


def test_heartbeat_payload_bounded(webhook: WebhookReceiver, fake_clock: FakeClock) -> None:
    """A huge summary is cut to 10 kB (the ping body limit of healthchecks-style services)."""
    hb = Heartbeat(HeartbeatConfig(url=f"{webhook.url}/p"), fake_clock)
    assert hb.beat("x" * 50_000)
    assert len(wait_for(lambda: webhook.received() or None, 5)[0].body) == 10_000

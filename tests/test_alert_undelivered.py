"""Nothing lost silently: real receivers on 127.0.0.1 that are down (closed port), answer 500 or 400;
the sender's reports become alert.undelivered events, counts in status and metrics, the failing/delivering
pair, and `supervisorctl events supervisor` shows them (the real CLI against an in-process daemon)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from supervisor.adapters.alerts.sender import AlertSender
from supervisor.adapters.control.client import ControlClient
from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.state import Store
from supervisor.cli.render import render_events
from supervisor.config import DaemonConfig, check_config, load_config
from supervisor.config.model import AlertChannel
from supervisor.core.alerts import channels as AC
from supervisor.core.alerts.channels import Delivery
from supervisor.core.alerts.message import AlertMessage
from supervisor.core.clock import FakeClock
from supervisor.core.errors import ControlError
from supervisor.daemon import build_daemon
from supervisor.daemon.loop import Daemon
from tests.harness import REPO, WebhookReceiver, free_port, wait_for, webhook_receiver
from tests.test_daemon_inprocess import _config

TOKEN = "tok-SECRET-5f1c9a"


def _undelivered(store: Store) -> list[dict[str, Any]]:
    return [e for e in store.read_events("supervisor", 500) if e["name"] == "alert.undelivered"]


def _raised(store: Store, kind_prefix: str) -> list[str]:
    """Titles of the alerts (raised or resolved) of the daemon whose title starts with ``kind_prefix``."""
    return [
        e["fields"]["title"]
        for e in store.read_events("supervisor", 500)
        if e["name"] in ("alert.raised", "alert.resolved") and e["fields"]["title"].startswith(kind_prefix)
    ]


def _bodies(recv: WebhookReceiver) -> list[str]:
    return [r.body.decode("utf-8", "replace") for r in recv.received()]


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode("utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _daemon_config(tmp: Path, gateway: str, channels: str, metrics_port: int) -> Path:
    """Profile p with a companion check of ``gateway`` every 30 s, the metrics endpoint and ``channels``."""
    return _config(
        tmp,
        f"companions:\n  - {{name: gw, url: '{gateway}/health', interval_s: 30, timeout_s: 2}}\n",
        f"metrics: {{listen: '127.0.0.1:{metrics_port}'}}\nalerts:\n  channels:\n{channels}",
    )


@contextmanager
def _daemon(config: DaemonConfig, clock: FakeClock) -> Iterator[Daemon]:
    """The daemon as build_daemon wires it (sender, fleet step, records, store, metrics), run in-process on a
    fake clock against a Docker engine that is not there; stopped (and its thread joined) at the end."""
    docker = DockerAdapter(base_url=f"unix://{config.state_dir.parent}/no-docker.sock", timeout=2)
    daemon = build_daemon(config, clock, docker=docker, alert_backoff_s=(0.01,))
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        yield daemon
    finally:
        daemon.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def _wait_body(recv: WebhookReceiver, text: str) -> None:
    wait_for(lambda: any(text in b for b in _bodies(recv)), 60, message=f"{text!r} delivered")


def _status(client: ControlClient) -> dict[str, Any] | None:
    try:
        return dict(client.call("status")["data"])
    except ControlError:
        return None


def test_down_500_and_400_receivers_are_recorded_counted_alerted_and_resolved_once(tmp_path: Path) -> None:
    """The daemon's own wiring: a companion failing makes a real alert; a closed port and a 500 are retried
    then given up (retries_exhausted), a 400 is rejected at once: each loss is an alert.undelivered event
    (channel, reason, title, alert kind, profile; no URL, no token), counted in status and metrics; each
    failing channel raises alerts.failing once, which the working channel shows and the failing one is not
    sent. Back up: alerts.delivering once, with the count, whatever is sent after it."""
    clock = FakeClock()
    with (
        webhook_receiver(status=503) as gateway,
        webhook_receiver() as good,
        webhook_receiver(status=500) as busy,
        webhook_receiver(status=400) as bad,
    ):
        down_port = free_port()
        channels = (
            f"    - {{kind: generic, name: good, url: '{good.url}/g/{TOKEN}'}}\n"
            f"    - {{kind: generic, name: busy, url: '{busy.url}/b/{TOKEN}'}}\n"
            f"    - {{kind: slack, name: bad, url: '{bad.url}/s/{TOKEN}'}}\n"
            f"    - {{kind: generic, name: down, url: 'http://127.0.0.1:{down_port}/d/{TOKEN}'}}\n"
        )
        config = load_config(_daemon_config(tmp_path, gateway.url, channels, free_port()))
        store = Store(config.state_dir, clock)
        client = ControlClient(config.socket_path, timeout=5)
        with _daemon(config, clock) as daemon:
            # the first companion check fails: one alert, lost on three channels, and the three failing
            # alerts each lost on the two other failing channels (the fake clock stands still meanwhile:
            # no docker.down, no daemon.started)
            wait_for(lambda: len(_undelivered(store)) >= 9, 60, message="nine alert.undelivered events")
            first = [e for e in _undelivered(store) if e["fields"]["title"] == "companion gw failing"]
            by_channel = {e["fields"]["channel"]: e for e in first}
            assert sorted(by_channel) == ["bad", "busy", "down"]
            assert {c: (e["fields"]["reason"], e["fields"]["detail"]) for c, e in by_channel.items()} == {
                "busy": ("retries_exhausted", "HTTP 500"),
                "bad": ("rejected", "HTTP 400"),
                "down": ("retries_exhausted", "connection error"),
            }
            assert by_channel["bad"]["profile"] == "supervisor"
            assert by_channel["bad"]["fields"] | {"detail": ""} == {
                "channel": "bad",
                "channel_kind": "slack",
                "reason": "rejected",
                "detail": "",
                "title": "companion gw failing",
                "alert_kind": "companion.failing",
                "alert_profile": "p",
            }
            failing = _raised(store, "alert channel")
            assert sorted(failing) == [
                "alert channel bad failing: rejected (HTTP 400)",
                "alert channel busy failing: HTTP 500 on every try",
                "alert channel down failing: connection error on every try",
            ]
            # the working channel shows the original and the three failing alerts
            good.wait_for_count(4)
            assert sum("alert channel" in b and "failing" in b for b in _bodies(good)) == 3
            # a failing channel is never sent the alert about itself; busy tried 3 messages x 3 tries
            assert not any("alert channel busy failing" in b for b in _bodies(busy))
            assert not any("alert channel bad failing" in b for b in _bodies(bad))
            assert len(busy.received()) == 9
            assert len(bad.received()) == 3
            # the failing alerts are lost on the other failing channels too: recorded, never re-raised
            assert len(_undelivered(store)) == 3 + 3 * 2

            # status and /metrics: each failed ping publishes the status (Docker is not there)
            doc = wait_for(
                lambda: (d := _status(client)) and d["daemon"]["alerts"]["undelivered"] == 9 and d,
                30,
                message="nine undelivered in the status",
            )
            alerts = doc["daemon"]["alerts"]
            rows = {c["name"]: c for c in alerts["channels"]}
            assert [c["name"] for c in alerts["channels"]] == ["good", "busy", "bad", "down"]
            assert (rows["good"]["state"], rows["good"]["undelivered"]) == ("delivering", 0)
            assert (rows["busy"]["state"], rows["busy"]["undelivered"]) == ("failing", 3)
            assert rows["busy"]["last_failure_reason"] == "retries_exhausted"
            assert daemon.parts.sources.metrics is not None
            got = _samples(daemon.parts.sources.metrics.url)
            lost = "vllm_supervisor_alerts_undelivered_total"
            assert got[(lost, (("channel", "busy"), ("reason", "retries_exhausted")))] == 3
            assert got[(lost, (("channel", "bad"), ("reason", "rejected")))] == 3
            assert got[(lost, (("channel", "down"), ("reason", "retries_exhausted")))] == 3
            assert got[("vllm_supervisor_alert_channel_failing", (("channel", "busy"),))] == 1
            assert got[("vllm_supervisor_alert_channel_failing", (("channel", "good"),))] == 0

            # busy and bad come back, down stays down; the next companion check (a fake half minute on)
            # finds the gateway back; Docker's silence (docker.down) and daemon.started follow it out
            busy.status = bad.status = gateway.status = 200
            clock.advance(31)
            for recv in (busy, bad, good):
                _wait_body(recv, "Docker not answering")
            assert any("alert channel busy delivering again" in b for b in _bodies(busy))  # it is told too
        # the daemon stopped: its channels' last reports are in the history
        titles = _raised(store, "alert channel")
        assert sorted(titles[3:]) == [
            "alert channel bad delivering again; 3 messages were lost meanwhile",
            "alert channel busy delivering again; 3 messages were lost meanwhile",
        ]  # once each, whatever came after; no new failing for down
        assert any("companion gw back" in b for b in _bodies(busy))
        history = (config.state_dir / "events.jsonl").read_text(encoding="utf-8")
        assert TOKEN not in history
        assert f"127.0.0.1:{down_port}" not in history

    text = render_events(store.read_events("supervisor", 500))
    assert "alert.undelivered" in text
    assert "channel=down" in text
    assert "reason=retries_exhausted" in text


def _msg(profile: str) -> AlertMessage:
    return AlertMessage(profile, "warning", "probe failing", "RUNNING", "DEGRADED", "2/5", "thor", 1.79e9)


def test_overflow_shutdown_and_unconfigured_channels_are_reported(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    """Dropped on a full queue, still queued when close() times out, sent after close, a channel without a
    URL: every loss is reported per channel with its reason (and a report that raises stops nothing).
    Each channel has its own queue: the stuck channel's overflow and close timeout are its own."""
    reports: list[Delivery] = []
    lock = threading.Lock()

    def report(d: Delivery) -> None:
        with lock:
            reports.append(d)
        if d.channel == "nourl" and d.reason == AC.UNCONFIGURED and len(reports) == 1:
            raise RuntimeError("a broken observer")

    with webhook_receiver(status=500) as recv:
        release = threading.Event()
        in_backoff = threading.Event()

        def stuck(_delay: float) -> None:
            in_backoff.set()
            release.wait(10)

        channels = (
            AlertChannel(kind="generic", name="nourl", url=None),
            AlertChannel(kind="generic", name="hook", url=f"{recv.url}/{TOKEN}"),
        )
        n = AlertSender(
            channels, 900.0, fake_clock, 5.0, host="thor", max_queue=2, sleep=stuck, on_delivery=report
        )
        assert n.send(_msg("p0"))
        assert in_backoff.wait(10)
        for i in (1, 2, 3):
            assert n.send(_msg(f"p{i}"))  # p1 is dropped for p3
        assert not n.close(0.2)  # p0 stuck in its backoff: p2 and p3 are lost at close
        release.set()
        assert not n.send(_msg("late"))
        wait_for(
            lambda: any(d.profile == "p0" and d.channel == "hook" for d in reports), 10, message="p0 report"
        )
    with lock:
        got = [(d.profile, d.channel, d.ok, d.reason) for d in reports]
    assert ("p0", "nourl", False, AC.UNCONFIGURED) in got
    assert ("p0", "hook", False, AC.RETRIES_EXHAUSTED) in got
    for profile, reason in (("p1", AC.QUEUE_OVERFLOW), ("p2", AC.CLOSE_TIMEOUT), ("p3", AC.CLOSE_TIMEOUT)):
        assert (profile, "hook", False, reason) in got
    # nourl's own worker is not stuck: each message is reported once (unconfigured, or dropped if its
    # worker had not taken p1 yet when p3 came), never lost to hook's close timeout
    nourl = sorted((p, r) for p, c, _ok, r in got if c == "nourl" and p != "late")
    assert [p for p, _r in nourl] == ["p0", "p1", "p2", "p3"]
    assert {r for _p, r in nourl} <= {AC.UNCONFIGURED, AC.QUEUE_OVERFLOW}
    assert ("late", "hook", False, AC.CLOSED) in got
    assert ("late", "nourl", False, AC.CLOSED) in got
    assert all(TOKEN not in d.detail for d in reports)


def _ctl(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "--socket", str(sock), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


def test_in_process_daemon_records_undelivered_alerts_and_supervisorctl_shows_them(tmp_path: Path) -> None:
    """A companion failing makes a real alert; the daemon's channels are a closed port and a 500. The losses
    are in `supervisorctl events supervisor`, `status --json` (daemon.alerts) and /metrics; when the 500
    receiver answers again the next alert goes out and alerts.delivering is raised once."""
    with webhook_receiver(status=503) as gateway, webhook_receiver(status=500) as busy:
        down = f"http://127.0.0.1:{free_port()}/d/{TOKEN}"
        channels = (
            f"    - {{kind: generic, name: down, url: '{down}'}}\n"
            f"    - {{kind: generic, name: busy, url: '{busy.url}/b/{TOKEN}'}}\n"
        )
        config = load_config(_daemon_config(tmp_path, gateway.url, channels, free_port()))
        clock = FakeClock()
        with _daemon(config, clock) as daemon:
            client = ControlClient(config.socket_path, timeout=5)

            def alerts_status() -> dict[str, Any] | None:
                try:
                    doc = client.call("status")["data"]
                except ControlError:
                    return None
                alerts: dict[str, Any] = doc["daemon"].get("alerts") or {}
                return alerts if alerts.get("undelivered", 0) >= 2 else None

            def lost_events() -> int:
                events = client.call("events", name="supervisor", n=200)["data"]["events"]
                return sum(1 for e in events if e["name"] == "alert.undelivered") >= 2

            wait_for(lost_events, 30, message="two alert.undelivered events")
            got = wait_for(alerts_status, 30, message="two undelivered alerts in the status")
            rows = {c["name"]: c for c in got["channels"]}
            assert rows["down"]["last_failure_detail"] == "connection error"
            assert rows["busy"]["last_failure_detail"] == "HTTP 500"
            assert rows["busy"]["state"] == "failing"

            out = _ctl(config.socket_path, "events", "supervisor", "-n", "100")
            assert out.returncode == 0, out.stderr
            lines = [ln for ln in out.stdout.splitlines() if "alert.undelivered" in ln]
            assert any("channel=down" in ln and "reason=retries_exhausted" in ln for ln in lines), out.stdout
            assert any("channel=busy" in ln and 'detail="HTTP 500"' in ln for ln in lines), out.stdout
            assert all(ln.split()[2] == "supervisor" for ln in lines)  # date, time, profile
            assert 'title="companion gw failing"' in out.stdout
            assert TOKEN not in out.stdout
            as_json = json.loads(_ctl(config.socket_path, "events", "supervisor", "--json").stdout)
            assert {e["profile"] for e in as_json} <= {"supervisor", "", None}
            assert _ctl(config.socket_path, "events", "nobody").returncode != 0  # still refused

            assert daemon.parts.sources.metrics is not None
            samples = _samples(daemon.parts.sources.metrics.url)
            key = (
                "vllm_supervisor_alerts_undelivered_total",
                (("channel", "busy"), ("reason", "retries_exhausted")),
            )
            assert samples[key] >= 1

            busy.status = 200
            gateway.status = 200
            clock.advance(31)  # the next companion check: the gateway is back, "companion gw back" is sent

            def delivering() -> list[dict[str, Any]]:
                events = client.call("events", name="supervisor", n=200)["data"]["events"]
                return [
                    e
                    for e in events
                    if e["name"] == "alert.resolved" and "delivering again" in e["fields"]["title"]
                ]

            (back,) = wait_for(delivering, 30, message="alerts.delivering for busy")
            assert back["fields"]["title"].startswith("alert channel busy delivering again;")
            # the first delivery after the fix may be another message (daemon.started settles at 30 s)
            _wait_body(busy, "companion gw back")


def test_the_profile_name_supervisor_is_reserved(tmp_path: Path) -> None:
    """`supervisorctl events supervisor` means the daemon: no profile may take the name."""
    (tmp_path / "supervisor.yaml").write_text("container:\n  image: img:1\n", encoding="utf-8")
    problems = check_config(tmp_path / "supervisor.yaml")
    assert [(p.key_path, p.value) for p in problems] == [("name", "'supervisor'")]
    assert "reserved" in str(problems[0])


def test_events_of_the_daemon_are_those_of_profile_supervisor_empty_or_none(tmp_path: Path) -> None:
    """`events supervisor` reads the daemon-wide events, old (no profile) and new (profile supervisor)."""
    store = Store(tmp_path, FakeClock())
    for profile, name in (("supervisor", "alert.undelivered"), ("", "docker.not_answering"), ("p", "x.y")):
        store.append_event({"name": name, "profile": profile})
    store.append_event({"name": "kernel.xid"})  # profile None
    assert [e["name"] for e in store.read_events("supervisor")] == [
        "alert.undelivered",
        "docker.not_answering",
        "kernel.xid",
    ]
    assert [e["name"] for e in store.read_events("p")] == ["x.y"]
    assert len(store.read_events()) == 4

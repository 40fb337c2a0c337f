"""One worker per alert channel: a dead or black-holed channel never delays another (real 127.0.0.1 servers).

The slow channel is a server that takes the request and answers only when the test releases it (a black
hole until then); the dead one is a port nobody listens on, its backoff pauses held until released. The
assertions are on order and counts, not on wall-clock timings.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from supervisor.adapters.alerts.sender import AlertSender
from supervisor.config.model import AlertChannel
from supervisor.core.alerts import channels as AC
from supervisor.core.alerts.channels import Delivery
from supervisor.core.alerts.message import AlertMessage
from supervisor.core.clock import FakeClock
from tests.harness import free_port, wait_for, webhook_receiver

N = 5


class Gate:
    """A real HTTP server that reads each request and answers 200 only once ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.port = 0
        self._lock = threading.Lock()
        self.received: list[str] = []  # the alerts' profiles, in arrival order
        self.answered = 0

    def got(self) -> int:
        with self._lock:
            return len(self.received)


@contextmanager
def gated_receiver() -> Iterator[Gate]:
    gate = Gate()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with gate._lock:
                gate.received.append(str(json.loads(body)["profile"]))
            gate.release.wait(30)  # bounded: the test releases it (at the latest on the way out)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            with gate._lock:
                gate.answered += 1

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    gate.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, name="gated-receiver", daemon=True)
    thread.start()
    try:
        yield gate
    finally:
        gate.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class Reports:
    """``on_delivery``, from every channel's thread, kept in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[Delivery] = []

    def __call__(self, d: Delivery) -> None:
        with self._lock:
            self.items.append(d)

    def of(self, channel: str) -> list[tuple[str, bool, str]]:
        with self._lock:
            return [(d.profile, d.ok, d.reason) for d in self.items if d.channel == channel]

    def order(self) -> list[str]:
        with self._lock:
            return [d.channel for d in self.items]


def _msg(profile: str) -> AlertMessage:
    return AlertMessage(profile, "critical", "emergency stop", "DEGRADED", "BACKOFF", "why", "thor", 1.79e9)


def _ch(name: str, url: str) -> AlertChannel:
    return AlertChannel(kind="generic", name=name, url=url)


def test_dead_and_black_holed_channels_do_not_delay_a_healthy_one(fake_clock: FakeClock) -> None:
    """N alerts: the healthy channel has them all while the slow one has not answered its first and the
    dead one is still in its first backoff; then the bad ones catch up, each on its own thread."""
    reports = Reports()
    held = threading.Event()  # the dead channel's backoff pauses last until the test lets them go
    with webhook_receiver() as ok, gated_receiver() as slow:
        channels = (
            _ch("h6-dead", f"http://127.0.0.1:{free_port()}/x"),
            _ch("h6-slow", f"http://127.0.0.1:{slow.port}/x"),
            _ch("h6-ok", f"{ok.url}/x"),  # last: sequential delivery would reach it last
        )
        n = AlertSender(
            channels,
            900.0,
            fake_clock,
            60.0,
            host="thor",
            sleep=lambda _d: held.wait(30),
            on_delivery=reports,
        )
        assert not [t for t in threading.enumerate() if t.name.startswith("alert-sender-h6-")]  # lazily
        try:
            for i in range(N):
                assert n.send(_msg(f"p{i}"))
            got = ok.wait_for_count(N)
            assert [r.json()["profile"] for r in got] == [f"p{i}" for i in range(N)]
            wait_for(lambda: len(reports.of("h6-ok")) == N, 10, message="the healthy channel's reports")
            wait_for(lambda: slow.got() == 1, 10, message="p0 on the slow channel")
            assert (slow.got(), slow.answered) == (1, 0)  # the slow one is still on its first message
            assert reports.of("h6-slow") == []
            assert reports.of("h6-dead") == []
            names = {t.name for t in threading.enumerate() if t.daemon}
            assert {"alert-sender-h6-dead", "alert-sender-h6-slow", "alert-sender-h6-ok"} <= names
            assert n.pending() == 2 * N  # N each on the two bad channels (queued or being sent)
            assert not n.flush(0.2)
        finally:
            held.set()
            slow.release.set()
        assert n.flush(30)
        assert n.close(10)
    assert reports.order()[:N] == ["h6-ok"] * N
    assert reports.of("h6-slow") == [(f"p{i}", True, "") for i in range(N)]
    assert reports.of("h6-dead") == [(f"p{i}", False, AC.RETRIES_EXHAUSTED) for i in range(N)]
    assert slow.received == [f"p{i}" for i in range(N)]


def test_overflow_on_one_channel_does_not_drop_another_channels_messages(fake_clock: FakeClock) -> None:
    """The slow channel's queue (2) overflows: it loses its oldest queued messages, reported for it only;
    the healthy channel gets every message."""
    reports = Reports()
    with webhook_receiver() as ok, gated_receiver() as slow:
        channels = (_ch("slow", f"http://127.0.0.1:{slow.port}/x"), _ch("ok", f"{ok.url}/x"))
        n = AlertSender(channels, 900.0, fake_clock, 60.0, host="thor", max_queue=2, on_delivery=reports)
        try:
            assert n.send(_msg("p0"))
            wait_for(lambda: slow.got() == 1, 10, message="p0 in flight on the slow channel")
            ok.wait_for_count(1)
            for i in range(1, N):  # slow: p1, p2 dropped for p3, p4
                assert n.send(_msg(f"p{i}"))
                ok.wait_for_count(i + 1)  # the healthy channel keeps up (its own queue never fills)
            assert [r.json()["profile"] for r in ok.received()] == [f"p{i}" for i in range(N)]
        finally:
            slow.release.set()
        assert n.close(10)
    assert reports.of("ok") == [(f"p{i}", True, "") for i in range(N)]
    slow_reports = reports.of("slow")
    assert [r for r in slow_reports if not r[1]] == [
        ("p1", False, AC.QUEUE_OVERFLOW),
        ("p2", False, AC.QUEUE_OVERFLOW),
    ]
    assert slow.received == ["p0", "p3", "p4"]


def test_close_reports_only_the_late_channels_queue_and_ends_sleeping_retries(fake_clock: FakeClock) -> None:
    """close(timeout) drains every channel at once within the total timeout: the healthy channel delivered
    all; the black-holed channel's queue is lost as close_timeout (for it only); a dead channel sleeping in
    a long backoff is woken (the give-up event) and reports its message at once."""
    reports = Reports()
    with webhook_receiver() as ok, gated_receiver() as slow:
        channels = (
            _ch("slow", f"http://127.0.0.1:{slow.port}/x"),
            _ch("dead", f"http://127.0.0.1:{free_port()}/x"),
            _ch("ok", f"{ok.url}/x"),
        )
        n = AlertSender(
            channels, 900.0, fake_clock, 60.0, host="thor", backoff_s=(300.0,), on_delivery=reports
        )
        try:
            assert n.send(_msg("p0"))
            wait_for(lambda: slow.got() == 1, 10, message="p0 in flight on the slow channel")
            for i in (1, 2):
                assert n.send(_msg(f"p{i}"))
            ok.wait_for_count(3)
            assert not n.close(0.5)
            assert not n.send(_msg("late"))
            # the dead channel's 300 s pause ended with close(): p0 given up on, the rest lost at close
            wait_for(lambda: len(reports.of("dead")) == 4, 10, message="the dead channel's reports")
        finally:
            slow.release.set()
        wait_for(lambda: ("p0", True, "") in reports.of("slow"), 10, message="the slow channel's p0")
    assert reports.of("ok") == [
        ("p0", True, ""),
        ("p1", True, ""),
        ("p2", True, ""),
        ("late", False, AC.CLOSED),
    ]
    assert sorted(reports.of("slow")) == sorted(
        [
            ("p0", True, ""),
            ("p1", False, AC.CLOSE_TIMEOUT),
            ("p2", False, AC.CLOSE_TIMEOUT),
            ("late", False, AC.CLOSED),
        ]
    )
    assert sorted(reports.of("dead")) == sorted(
        [
            ("p0", False, AC.RETRIES_EXHAUSTED),
            ("p1", False, AC.CLOSE_TIMEOUT),
            ("p2", False, AC.CLOSE_TIMEOUT),
            ("late", False, AC.CLOSED),
        ]
    )
    assert slow.received == ["p0"]


def test_a_failing_channel_is_skipped_and_a_sender_without_workers_closes_at_once(
    fake_clock: FakeClock,
) -> None:
    """``skip`` leaves that channel's queue alone; nothing sent: no thread, close() is immediate."""
    reports = Reports()
    with webhook_receiver() as ok:
        channels = (_ch("a", f"{ok.url}/a"), _ch("b", f"{ok.url}/b"))
        n = AlertSender(channels, 900.0, fake_clock, 5.0, host="thor", on_delivery=reports)
        assert n.send(_msg("p0"), skip="a", condition="alerts:a")
        assert n.close(10)
        assert [r.path for r in ok.received()] == ["/b"]
    assert reports.of("a") == []
    assert reports.of("b") == [("p0", True, "")]
    assert not AlertSender((_ch("only", "http://127.0.0.1:1/x"),), 900.0, fake_clock).send(
        _msg("q"), skip="only"
    )
    assert AlertSender((), 900.0, fake_clock).close(0)

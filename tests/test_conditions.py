"""The raised/resolved condition tracker: pure decisions, its file, and the one choke point (Records.alert)
delivering through a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from supervisor.adapters.alerts.sender import AlertSender
from supervisor.adapters.store.state import CONDITIONS_FILE, Store
from supervisor.config.model import AlertChannel
from supervisor.core.actions import Alert
from supervisor.core.alerts.conditions import (
    CONDITIONS,
    DAEMON_PROFILE,
    Conditions,
    Raised,
    conditions_of,
)
from supervisor.core.clock import FakeClock, format_duration
from supervisor.core.vocab import Intent
from supervisor.daemon.executor.records import Records
from tests.harness import WebhookReceiver

T0 = 1_790_000_000.0


def _a(kind: str, title: str = "", *, params: tuple[tuple[str, str], ...] = (), **kw: Any) -> Alert:
    return Alert("info", title or kind, "A", "B", "why", kind=kind, params=params, **kw)


# ---- pure -------------------------------------------------------------------------------------------


def test_raise_then_resolve_once_with_the_duration() -> None:
    """A raised condition is resolved by exactly one resolving alert, which says how long it lasted."""
    c = Conditions()
    v, c = c.decide("p", _a("breaker.open", "circuit breaker open"), T0)
    assert (v.send, v.event, v.conditions, v.changed) == (True, "alert.raised", ("breaker", "serving"), True)
    assert c.get("p", "breaker") == Raised("breaker.open", "circuit breaker open", T0)
    v, c = c.decide("p", _a("breaker.reset"), T0 + 2 * 3600 + 13 * 60)
    assert (v.send, v.event, v.resolves) == (True, "alert.resolved", True)
    assert [x.detail() for x in v.cleared] == [("open for", "2 h 13 min")]
    assert c.get("p", "breaker") is None
    assert c.get("p", "serving") is not None  # the breaker is closed; serving again is another matter
    v, c = c.decide("p", _a("breaker.reset"), T0 + 9000)
    assert (v.send, v.event, v.changed) == (False, "alert.resolve_unraised", False)


def test_a_repeat_raise_keeps_the_first_and_goes_on_to_dedupe() -> None:
    """Raised twice: both are sent (the sender's dedupe decides), the condition dates from the first."""
    c = Conditions()
    _, c = c.decide("p", _a("breaker.open"), T0)
    v, c2 = c.decide("p", _a("breaker.still_open"), T0 + 1800)
    assert v.send
    assert not v.changed
    assert c2 == c
    v, _ = c2.decide("p", _a("breaker.reset"), T0 + 3600)
    assert v.cleared[0].raised.kind == "breaker.open"
    assert v.cleared[0].lasted_s == 3600


def test_resolving_a_condition_never_raised_is_not_sent() -> None:
    """auth.enforced after every start: only news when auth.open/no_key was raised."""
    c = Conditions()
    v, c2 = c.decide("p", _a("auth.enforced"), T0)
    assert (v.send, v.event, v.conditions) == (False, "alert.resolve_unraised", ("auth",))
    assert c2 == c
    _, c = c.decide("p", _a("auth.no_key"), T0)
    v, c = c.decide("q", _a("auth.enforced"), T0 + 5)  # another profile's condition is not ours
    assert not v.send
    v, c = c.decide("p", _a("auth.enforced"), T0 + 5)
    assert v.send
    assert v.cleared[0].detail() == ("open for", "5 s")


def test_recovered_resolves_down_and_degraded_in_one_message() -> None:
    """One 'recovered' clears every condition it resolves that was raised, one duration row each."""
    c = Conditions()
    _, c = c.decide("p", _a("degraded"), T0)
    _, c = c.decide("p", _a("emergency.stop"), T0 + 120)
    _, c = c.decide("p", _a("start.failed"), T0 + 200)  # a repeat of 'serving'
    v, c = c.decide("p", _a("recovered"), T0 + 720)
    assert v.send
    assert [x.detail() for x in v.cleared] == [("down for", "10 min"), ("degraded for", "12 min")]
    assert c.raised == ()


def test_plain_alerts_and_explicit_conditions() -> None:
    """No kind in the table: a plain alert. An explicit condition/resolves on the alert wins."""
    v, c = Conditions().decide("p", _a("kv_pool.lottery"), T0)
    assert (v.send, v.event, v.conditions) == (True, "alert.raised", ())
    assert c.raised == ()
    _, c = c.decide("p", _a("", condition="custom"), T0)
    assert c.get("p", "custom") is not None
    v, c = c.decide("p", _a("", condition="custom", resolves=True), T0 + 61)
    assert v.send
    assert [x.detail() for x in v.cleared] == [("lasted", "1 min")]


def test_instance_keys() -> None:
    """companion:<name> from the alert's name param: two companions are two conditions."""
    gw, db = (("name", "gw"),), (("name", "db"),)
    assert conditions_of(_a("companion.failing", params=gw)) == (("companion:gw",), False)
    c = Conditions()
    _, c = c.decide("p", _a("companion.failing", params=gw), T0)
    _, c = c.decide("p", _a("companion.failing", params=db), T0 + 1)
    v, c = c.decide("p", _a("companion.back", params=gw), T0 + 30)
    assert v.send
    assert [x.condition for x in v.cleared] == ["companion:gw"]
    assert [k for _, k, _ in c.raised] == ["companion:db"]
    v, c = c.decide("p", _a("companion.back", params=gw), T0 + 40)
    assert not v.send


def test_maintenance_done_and_failed_are_news_of_their_own() -> None:
    """A maintenance result is sent even with nothing raised (e.g. started under an older daemon)."""
    v, _ = Conditions().decide("p", _a("maintenance.done"), T0)
    assert (v.send, v.event, v.cleared) == (True, "alert.resolved", ())
    _, c = Conditions().decide("p", _a("maintenance.started"), T0)
    v, c = c.decide("p", _a("maintenance.failed"), T0 + 700)
    assert v.send
    assert v.cleared[0].detail() == ("took", "11 min")
    v, _ = c.decide("p", _a("maintenance.cancelled"), T0 + 800)
    assert not v.send  # a cancel is only news when it resolves a started one


def test_every_brief_pair_is_in_the_table() -> None:
    """The agreed pairs (docs/alerts.md "Raised and resolved")."""
    pairs = {(r, x) for c in CONDITIONS for r in c.raised_by for x in c.resolved_by}
    for pair in [
        ("breaker.open", "breaker.reset"),
        ("breaker.open_at_start", "breaker.reset"),
        ("breaker.still_open", "breaker.reset"),
        ("auth.open", "auth.enforced"),
        ("auth.no_key", "auth.enforced"),
        ("reserve.low", "reserve.ok"),
        ("maintenance.started", "maintenance.done"),
        ("maintenance.started", "maintenance.failed"),
        ("degraded", "recovered"),
        ("container.died", "recovered"),
        ("docker.down", "docker.up"),
        ("alerts.failing", "alerts.delivering"),
        ("companion.failing", "companion.back"),
    ]:
        assert pair in pairs


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0 s"),
        (59, "59 s"),
        (60, "1 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (7980, "2 h 13 min"),
        (86400, "1 d"),
        (100800, "1 d 4 h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_round_trip_and_shape_errors() -> None:
    c = Conditions()
    _, c = c.decide("p", _a("breaker.open", "open"), T0)
    _, c = c.decide(DAEMON_PROFILE, _a("docker.down"), T0 + 1.5)
    assert Conditions.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    bads: list[object] = [[], {"raised": {}}, {"raised": [1]}, {"raised": [{"profile": "p"}]}]
    for bad in bads:
        with pytest.raises(ValueError, match=r"expected|must be"):
            Conditions.from_dict(bad)
    item = {"profile": "p", "condition": "x", "kind": "k", "title": "t", "at": "soon"}
    with pytest.raises(ValueError, match=r"raised\[0\]\.at"):
        Conditions.from_dict({"raised": [item]})


# ---- Records: the choke point, its file -------------------------------------------------------------


class Sink:
    """Collects what Records hands to the sender."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Alert, tuple[tuple[str, str], ...]]] = []
        self._lock = threading.Lock()

    def __call__(self, profile: str, alert: Alert, diagnosis: str | None, details: Any) -> bool:
        with self._lock:
            self.sent.append((profile, alert, details))
        return True


def test_a_condition_survives_a_daemon_restart(tmp_path: Path, fake_clock: FakeClock) -> None:
    """Raised before a restart (conditions.json), resolved after it by the next daemon's Records."""
    store = Store(tmp_path, fake_clock)
    sink = Sink()
    Records(store, fake_clock, sink).alert("p", "vllm-p", _a("breaker.open", "circuit breaker open"), None)
    assert (tmp_path / CONDITIONS_FILE).stat().st_mode & 0o777 == 0o600
    fake_clock.advance(600)
    records = Records(Store(tmp_path, fake_clock), fake_clock, sink)  # a new daemon
    assert records.is_raised("p", "breaker")
    records.alert("p", "vllm-p", _a("breaker.reset", "circuit breaker reset by root (uid 0)"), None)
    records.alert("p", "vllm-p", _a("breaker.reset", "circuit breaker reset by root (uid 0)"), None)
    assert [a.kind for _, a, _ in sink.sent] == ["breaker.open", "breaker.reset"]
    _, resolved, details = sink.sent[1]
    assert details == (("container", "vllm-p"), ("open for", "10 min"))
    assert ("lasted", "10 min") in resolved.params
    events = [(e["name"], e["fields"].get("condition")) for e in store.read_events("p", 10)]
    assert events == [
        ("alert.raised", "breaker,serving"),
        ("alert.resolved", "breaker"),
    ]  # the second reset resolves nothing: not sent, and not history (a debug log line)
    assert store.read_events("p", 10)[1]["fields"]["lasted_s"] == 600
    # serving stays raised (a recovered resolves it): the file says so
    saved = json.loads((tmp_path / CONDITIONS_FILE).read_text())
    assert [(r["profile"], r["condition"]) for r in saved["raised"]] == [("p", "serving")]


def test_a_corrupt_file_is_an_error_and_an_empty_set(tmp_path: Path, fake_clock: FakeClock) -> None:
    """Not JSON: a clear log error, the file kept aside, an empty set; other state files untouched."""
    store = Store(tmp_path, fake_clock)
    store.save_intent("p", Intent.STOP)
    (tmp_path / CONDITIONS_FILE).write_text('{"raised": [')
    sink = Sink()
    with capture_logs() as logs:
        records = Records(store, fake_clock, sink)
    [err] = [e for e in logs if e["event"] == "conditions.unreadable"]
    assert err["log_level"] == "error"
    assert "not valid JSON" in err["error"]
    assert list(tmp_path.glob(f"{CONDITIONS_FILE}.corrupt-*"))
    assert store.load_intent("p") == "stop"
    records.alert("p", "c", _a("reserve.ok"), None)  # nothing raised: not sent
    records.alert("p", "c", _a("reserve.low"), None)
    assert [a.kind for _, a, _ in sink.sent] == ["reserve.low"]
    assert Conditions.from_dict(json.loads((tmp_path / CONDITIONS_FILE).read_text())).get("p", "reserve")
    # valid JSON of the wrong shape: the same (error, empty set), never a crash
    (tmp_path / CONDITIONS_FILE).write_text('{"raised": [{"profile": 1}]}')
    with capture_logs() as logs:
        assert not Records(store, fake_clock, sink).is_raised("p", "reserve")
    assert [e["event"] for e in logs] == ["conditions.unreadable"]


def test_threads_resolve_exactly_once(tmp_path: Path, fake_clock: FakeClock) -> None:
    """Records.alert runs on the loop and on pool threads: one raise, eight racing resolves -> one sent."""
    sink = Sink()
    records = Records(Store(tmp_path, fake_clock), fake_clock, sink)
    records.alert("p", "c", _a("degraded"), None)
    barrier = threading.Barrier(8)

    def resolve() -> None:
        barrier.wait(5)
        records.alert("p", "c", _a("recovered"), None)

    threads = [threading.Thread(target=resolve) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [a.kind for _, a, _ in sink.sent] == ["degraded", "recovered"]


def test_a_resolved_goes_out_once_through_a_real_receiver(
    tmp_path: Path, fake_clock: FakeClock, webhook: WebhookReceiver
) -> None:
    """Through the real sender to 127.0.0.1: raised, resolved once (with how long), the repeat not at all."""
    sender = AlertSender(
        (AlertChannel(kind="generic", name="hook", url=f"{webhook.url}/generic"),), 900.0, fake_clock, 5.0
    )
    try:
        records = Records(Store(tmp_path, fake_clock), fake_clock, sender.alert)
        down = Alert(
            "critical", "Docker not answering", "answering", "not answering", "refused", kind="docker.down"
        )
        records.alert("", "", down, None)
        fake_clock.advance(95)
        up = Alert(
            "info", "Docker answering again", "not answering", "answering", "ping ok", kind="docker.up"
        )
        records.alert("", "", up, None)
        records.alert("", "", up, None)
        assert sender.flush(10)
    finally:
        sender.close(5)
    bodies = [r.json() for r in webhook.received()]
    assert [b["title"] for b in bodies] == ["Docker not answering", "Docker answering again"]
    assert bodies[1]["profile"] == DAEMON_PROFILE == "supervisor"
    assert bodies[1]["details"] == {"not answering for": "1 min"}

"""supervisor.core.alerts.channels: when a channel is failing, when it delivers again, the loop guard."""

from __future__ import annotations

from dataclasses import replace

from supervisor.core.actions import Alert
from supervisor.core.alerts import channels as AC
from supervisor.core.alerts.catalog import MESSAGES
from supervisor.core.alerts.channels import ChannelHealth, Delivery

T0 = 1_790_000_000.0


def lost(reason: str = AC.RETRIES_EXHAUSTED, detail: str = "HTTP 500", **kw: object) -> Delivery:
    base = Delivery("ops", "slack", False, reason, detail, "emergency stop", "emergency.stop", "qwen")
    return replace(base, **kw)  # type: ignore[arg-type]


def delivered(**kw: object) -> Delivery:
    return replace(Delivery("ops", "slack", True, title="x"), **kw)  # type: ignore[arg-type]


def test_the_first_lost_message_raises_failing_once_and_a_delivery_resolves_it_with_the_count() -> None:
    """Lost (after its retries) -> alerts.failing; more losses say nothing; delivered -> alerts.delivering
    with how many were lost meanwhile; the next delivery says nothing."""
    h = ChannelHealth("ops", "slack")
    assert h.state == "unknown"
    h, alert = h.observe(lost(), T0)
    assert isinstance(alert, Alert)
    assert (alert.kind, alert.condition, alert.resolves, alert.severity) == (
        "alerts.failing",
        "alerts:ops",
        False,
        "warning",
    )
    assert alert.title == "alert channel ops failing: HTTP 500 on every try"
    assert '"emergency stop" (qwen)' in alert.reason
    assert dict(alert.params) == {"channel": "ops", "why": "HTTP 500 on every try"}
    assert (h.state, h.failing, h.consecutive, h.undelivered) == ("failing", True, 1, 1)
    for i in range(3):
        h, again = h.observe(lost(AC.REJECTED, "HTTP 400"), T0 + 1 + i)
        assert again is None
    assert (h.consecutive, h.lost, h.undelivered) == (4, 4, 4)
    assert (h.last_failure_at, h.last_failure_reason, h.last_failure_detail) == (
        T0 + 3,
        "rejected",
        "HTTP 400",
    )
    h, back = h.observe(delivered(), T0 + 10)
    assert back is not None
    assert (back.kind, back.condition, back.resolves, back.severity) == (
        "alerts.delivering",
        "alerts:ops",
        True,
        "info",
    )
    assert back.title == "alert channel ops delivering again; 4 messages were lost meanwhile"
    assert dict(back.params) == {"channel": "ops", "lost": "4"}
    assert (h.state, h.failing, h.consecutive, h.lost, h.undelivered, h.last_ok_at) == (
        "delivering",
        False,
        0,
        0,
        4,
        T0 + 10,
    )
    h, quiet = h.observe(delivered(), T0 + 11)
    assert quiet is None


def test_one_lost_message_reads_in_the_singular() -> None:
    h, _ = ChannelHealth("ops", "slack").observe(lost(), T0)
    _, back = h.observe(delivered(), T0 + 1)
    assert back is not None
    assert back.title == "alert channel ops delivering again; 1 message was lost meanwhile"


def test_a_delivery_before_any_loss_says_nothing() -> None:
    h, alert = ChannelHealth("ops", "slack").observe(delivered(), T0)
    assert alert is None
    assert h.state == "delivering"


def test_losses_that_are_not_the_channels_fault_are_counted_but_raise_nothing() -> None:
    """Queue overflow, close timeout, a stop, a bug: counted (and in 'lost meanwhile'), never failing."""
    h = ChannelHealth("ops", "slack")
    for reason in (AC.QUEUE_OVERFLOW, AC.CLOSE_TIMEOUT, AC.CLOSED, AC.INTERNAL_ERROR):
        h, alert = h.observe(lost(reason, ""), T0)
        assert alert is None, reason
    assert (h.state, h.undelivered, h.consecutive) == ("unknown", 4, 0)
    h, alert = h.observe(lost(AC.UNCONFIGURED, "no URL configured"), T0 + 1)
    assert alert is not None
    assert alert.title == "alert channel ops failing: no URL configured"
    _, back = h.observe(delivered(), T0 + 2)
    assert back is not None
    assert "5 messages were lost" in back.title


def test_fail_after_two_needs_two_losses_in_a_row() -> None:
    h, first = ChannelHealth("ops", "slack").observe(lost(), T0, fail_after=2)
    assert first is None
    assert h.state == "failing"  # the status tells at once; the alert waits for the second loss
    h, _ = h.observe(delivered(), T0 + 1, fail_after=2)
    h, again = h.observe(lost(), T0 + 2, fail_after=2)
    assert again is None  # the delivery in between reset the count
    _, second = h.observe(lost(), T0 + 3, fail_after=2)
    assert second is not None
    assert second.kind == "alerts.failing"


def test_a_lost_message_about_alert_channels_never_makes_a_channel_failing() -> None:
    """The loop guard: losing alerts.failing / alerts.delivering counts, but raises nothing."""
    h = ChannelHealth("ops", "slack")
    about = lost(alert_kind="alerts.failing", condition="alerts:other", title="alert channel other failing")
    h, alert = h.observe(about, T0)
    assert alert is None
    assert (h.undelivered, h.failing, h.state) == (1, False, "failing")
    h, alert = h.observe(lost(), T0 + 1)  # a real message lost next: now it is said
    assert alert is not None
    assert alert.kind == "alerts.failing"


def test_alerts_about_failing_channels_cannot_feed_each_other() -> None:
    """Every channel down: each alert raised goes (as the sender does) to every channel but the one it is
    about, and is lost there. One alerts.failing per channel, then silence: the chain ends."""
    names = ("a", "b", "c")
    health = {n: ChannelHealth(n, "generic") for n in names}
    queue: list[tuple[str, str, str | None, bool]] = [("emergency stop", "emergency.stop", None, False)]
    raised: list[Alert] = []
    rounds = 0
    while queue and rounds < 100:
        rounds += 1
        title, kind, condition, resolves = queue.pop(0)
        skip = None if resolves else AC.about_channel(condition)
        for n in names:
            if n == skip:
                continue
            d = Delivery(
                n, "generic", False, AC.RETRIES_EXHAUSTED, "connection error", title, kind, "p", condition
            )
            health[n], alert = health[n].observe(d, T0 + rounds)
            if alert is not None:
                raised.append(alert)
                queue.append((alert.title, alert.kind, alert.condition, alert.resolves))
    assert not queue
    assert sorted(a.condition or "" for a in raised) == ["alerts:a", "alerts:b", "alerts:c"]
    assert all(h.failing for h in health.values())


def test_about_channel_and_condition_keys() -> None:
    assert AC.condition_for("ops-feishu") == "alerts:ops-feishu"
    assert AC.about_channel("alerts:ops-feishu") == "ops-feishu"
    assert AC.about_channel("breaker") is None
    assert AC.about_channel(None) is None
    assert AC.about_channel("alerts:") is None


def test_describe_every_reason() -> None:
    assert AC.describe(AC.REJECTED, "HTTP 403") == "rejected (HTTP 403)"
    assert AC.describe(AC.RETRIES_EXHAUSTED, "timeout") == "timeout on every try"
    assert AC.describe(AC.UNREADABLE, "url/secret file unreadable (PermissionError)") == (
        "url/secret file unreadable (PermissionError)"
    )
    assert AC.describe(AC.QUEUE_OVERFLOW, "") == "dropped: alert queue full"
    assert AC.describe(AC.CLOSE_TIMEOUT, "") == "still queued when the daemon stopped"
    assert AC.describe(AC.CLOSED, "") == "sent while the daemon was stopping"
    assert AC.describe(AC.INTERNAL_ERROR, "KeyError") == "could not be built (KeyError)"
    assert set(AC.REASONS) >= AC.CHANNEL_REASONS


def test_event_fields_and_status_dict() -> None:
    d = lost()
    assert d.fields() == {
        "channel": "ops",
        "channel_kind": "slack",
        "reason": "retries_exhausted",
        "detail": "HTTP 500",
        "title": "emergency stop",
        "alert_kind": "emergency.stop",
        "alert_profile": "qwen",
    }
    h, _ = ChannelHealth("ops", "slack").observe(d, T0)
    assert h.to_dict() == {
        "name": "ops",
        "kind": "slack",
        "state": "failing",
        "undelivered": 1,
        "consecutive_failures": 1,
        "last_ok_at": None,
        "last_failure_at": T0,
        "last_failure_reason": "retries_exhausted",
        "last_failure_detail": "HTTP 500",
    }


def test_the_catalogue_has_both_kinds_with_the_params_they_get() -> None:
    """Every placeholder of the two entries is filled by the alert's params, in both languages."""
    h, failing = ChannelHealth("ops", "slack").observe(lost(), T0)
    _, back = h.observe(delivered(), T0 + 1)
    for alert in (failing, back):
        assert alert is not None
        entry = MESSAGES[alert.kind]
        params = dict(alert.params)
        for text in (entry.title.en, entry.title.zh):
            assert text.format(**params)
        assert entry.title.en.format(**params).startswith(f"alert channel {params['channel']}")

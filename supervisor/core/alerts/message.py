"""Alert messages, pure: the message model (one flip of one profile, with its catalogue kind and
params) and the dedupe decision. Its text in a language is core/alerts/view.py, each platform's JSON
body core/alerts/payloads.py; the sender adapter does the I/O. See docs/alerts.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from supervisor.core.actions import Alert
from supervisor.core.alerts.localize import title_en

SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")


@dataclass(frozen=True)
class AlertMessage:
    """One alert as a human should read it: a state flip of one profile on one host."""

    profile: str
    severity: str  # "info" | "warning" | "critical"
    title: str
    old_state: str
    new_state: str
    reason: str
    host: str
    at: float  # epoch seconds
    diagnosis: str | None = None
    details: tuple[tuple[str, str], ...] = ()
    #: The catalogue's message id (core/alerts/catalog.py) and the values its templates fill in; "" renders
    #: ``title`` as it is, in every language.
    kind: str = ""
    params: tuple[tuple[str, str], ...] = ()


def message_from_alert(
    profile: str,
    alert: Alert,
    *,
    host: str,
    at: float,
    diagnosis: str | None = None,
    details: tuple[tuple[str, str], ...] = (),
) -> AlertMessage:
    """The :class:`AlertMessage` for a state machine's ``Alert`` action."""
    return AlertMessage(
        profile=profile,
        severity=alert.severity if alert.severity in SEVERITIES else "warning",
        title=alert.title,
        old_state=alert.old_state,
        new_state=alert.new_state,
        reason=alert.reason,
        host=host,
        at=at,
        diagnosis=diagnosis,
        details=details,
        kind=alert.kind,
        params=alert.params,
    )


def test_message(host: str, now: float) -> AlertMessage:
    """The message ``supervisorctl test-alert`` sends."""
    return AlertMessage(
        profile="test-alert",
        severity="info",
        title=title_en("test"),
        old_state="-",
        new_state="-",
        reason="supervisorctl test-alert: this channel receives vllm-supervisor alerts",
        host=host,
        at=now,
        kind="test",
    )


def iso_local(at: float) -> str:
    """``at`` as ISO 8601 in the host's local time zone, to the second, with its UTC offset."""
    return datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(text.split())


# ---- dedupe -----------------------------------------------------------------------------------------


def dedupe_key(msg: AlertMessage) -> tuple[str, str, str, str, str]:
    """What makes two alerts "identical": profile, severity, title, target state and reason."""
    return (msg.profile, msg.severity, msg.title, msg.new_state, msg.reason)


@dataclass(frozen=True)
class _Last:
    key: tuple[str, str, str, str, str]
    sent_at: float
    suppressed: int = 0


@dataclass(frozen=True)
class DedupeDecision:
    """Whether to send, and how many identical alerts were suppressed before this one."""

    send: bool
    suppressed_before: int = 0


@dataclass(frozen=True)
class Deduper:
    """Drops an alert identical to the *last one sent for the same profile* within ``window_s``.

    So the latest message in the chat always tells the profile's current state (a flip back and
    forth is never swallowed), an identical repeat is delivered at least once per window, and a
    delivered repeat says how many copies were dropped. ``now`` is monotonic seconds.
    """

    window_s: float
    last: tuple[tuple[str, _Last], ...] = field(default=())

    def _get(self, profile: str) -> _Last | None:
        return next((v for p, v in self.last if p == profile), None)

    def _put(self, profile: str, value: _Last) -> Deduper:
        rest = tuple((p, v) for p, v in self.last if p != profile)
        return replace(self, last=(*rest, (profile, value)))

    def decide(self, msg: AlertMessage, now: float) -> tuple[DedupeDecision, Deduper]:
        """The decision for ``msg`` at ``now`` and the deduper that remembers it."""
        key = dedupe_key(msg)
        prev = self._get(msg.profile)
        if prev is not None and prev.key == key and now - prev.sent_at < self.window_s:
            counted = replace(prev, suppressed=prev.suppressed + 1)
            return DedupeDecision(False), self._put(msg.profile, counted)
        before = prev.suppressed if prev is not None and prev.key == key else 0
        return DedupeDecision(True, before), self._put(msg.profile, _Last(key, now))

"""Alert channel health, pure: what a channel lost, when it is failing, when it delivers again.

The alert sender reports what became of every message on every channel (:class:`Delivery`). A message
it gives up on is *undelivered* (``reason`` one of :data:`REASONS`); the daemon records each as an
``alert.undelivered`` history event. :meth:`ChannelHealth.observe` folds the reports of one channel and
says when to raise ``alerts.failing`` (a message was lost for a reason that is the channel's: see
:data:`CHANNEL_REASONS`) and when to resolve it with ``alerts.delivering`` (the channel delivered again;
the message counts what was lost meanwhile).

Loop guard: a message *about* alert channels (condition ``alerts:<channel>``) never makes a channel
failing (its loss is recorded and counted all the same), and ``alerts.failing`` is raised once per
episode; so an alert about a failing channel cannot raise another one, however many channels fail.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from supervisor.core.actions import Alert

#: The condition of a channel's failing/delivering pair is ``alerts:<channel>``.
CONDITION_PREFIX: Final = "alerts:"
#: Undelivered messages in a row (for a channel reason) that make a channel failing: each one already
#: had its retries, so the first lost message is worth telling.
FAIL_AFTER: Final = 1

#: Why a message was not delivered to a channel (the ``reason`` of ``alert.undelivered``).
REJECTED: Final = "rejected"  # a permanent failure: 4xx, a platform error code in a 200 (not retried)
RETRIES_EXHAUSTED: Final = (
    "retries_exhausted"  # transient failures (connection, timeout, 429, 5xx) on every try
)
UNCONFIGURED: Final = "unconfigured"  # no URL (or a Telegram channel without chat_id)
UNREADABLE: Final = "unreadable"  # the url_file / secret_file could not be read
QUEUE_OVERFLOW: Final = "queue_overflow"  # dropped: the queue was full (the oldest message goes)
CLOSE_TIMEOUT: Final = "close_timeout"  # still queued when the daemon stopped and close() timed out
CLOSED: Final = "closed"  # sent after the sender was closed (the daemon is stopping)
INTERNAL_ERROR: Final = "internal_error"  # the sender could not build the message (a bug: logged)
REASONS: Final = (
    REJECTED,
    RETRIES_EXHAUSTED,
    UNCONFIGURED,
    UNREADABLE,
    QUEUE_OVERFLOW,
    CLOSE_TIMEOUT,
    CLOSED,
    INTERNAL_ERROR,
)
#: The reasons that say something about the channel (the others are the sender's own: a burst, a stop).
CHANNEL_REASONS: Final = frozenset({REJECTED, RETRIES_EXHAUSTED, UNCONFIGURED, UNREADABLE})


@dataclass(frozen=True)
class Delivery:
    """What became of one message on one channel: delivered (``ok``) or not, and why (no URL, no token)."""

    channel: str
    channel_kind: str
    ok: bool
    reason: str = ""  # one of REASONS when not ok
    detail: str = ""  # short and scrubbed: "HTTP 500", "connection error", "feishu error 19021: ..."
    title: str = ""  # the message's title
    alert_kind: str = ""  # its catalogue id ("" when it has none)
    profile: str = ""  # the profile it was about
    condition: str | None = None  # the condition it raised or resolved

    def fields(self) -> dict[str, object]:
        """The fields of its ``alert.undelivered`` history event."""
        return {
            "channel": self.channel,
            "channel_kind": self.channel_kind,
            "reason": self.reason,
            "detail": self.detail,
            "title": self.title,
            "alert_kind": self.alert_kind,
            "alert_profile": self.profile,
        }


def condition_for(channel: str) -> str:
    """The condition key of ``channel``'s failing/delivering pair."""
    return CONDITION_PREFIX + channel


def about_channel(condition: str | None) -> str | None:
    """The channel a message is about (its condition is ``alerts:<channel>``), else None."""
    if condition is None or not condition.startswith(CONDITION_PREFIX):
        return None
    return condition.removeprefix(CONDITION_PREFIX) or None


def describe(reason: str, detail: str) -> str:
    """A short human text of why a message was not delivered."""
    if reason == REJECTED:
        return f"rejected ({detail})" if detail else "rejected"
    if reason == RETRIES_EXHAUSTED:
        return f"{detail or 'failed'} on every try"
    if reason == QUEUE_OVERFLOW:
        return "dropped: alert queue full"
    if reason == CLOSE_TIMEOUT:
        return "still queued when the daemon stopped"
    if reason == CLOSED:
        return "sent while the daemon was stopping"
    if reason == INTERNAL_ERROR:
        return f"could not be built ({detail})" if detail else "could not be built"
    return detail or reason


@dataclass(frozen=True)
class ChannelHealth:
    """What is known of one channel since the daemon started."""

    name: str
    kind: str
    failing: bool = False  # alerts.failing raised and not resolved yet
    consecutive: int = 0  # messages lost in a row for a channel reason
    lost: int = 0  # messages lost since the last one delivered (the "meanwhile" of alerts.delivering)
    undelivered: int = 0  # messages lost in all
    last_ok_at: float | None = None
    last_failure_at: float | None = None
    last_failure_reason: str | None = None
    last_failure_detail: str | None = None

    def observe(
        self, d: Delivery, now: float, fail_after: int = FAIL_AFTER
    ) -> tuple[ChannelHealth, Alert | None]:
        """The health after one report, and the alert it calls for (None: nothing to say)."""
        if d.ok:
            back = replace(self, failing=False, consecutive=0, lost=0, last_ok_at=now)
            return back, (delivering(self.name, self.lost) if self.failing else None)
        counts = d.reason in CHANNEL_REASONS
        new = replace(
            self,
            consecutive=self.consecutive + 1 if counts else self.consecutive,
            lost=self.lost + 1,
            undelivered=self.undelivered + 1,
            last_failure_at=now,
            last_failure_reason=d.reason,
            last_failure_detail=d.detail,
        )
        raise_it = counts and not self.failing and new.consecutive >= fail_after
        if not raise_it or about_channel(d.condition) is not None:  # the loop guard (module docstring)
            return new, None
        return replace(new, failing=True), failing(self.name, self.kind, d)

    @property
    def state(self) -> str:
        """``failing`` (its last message was lost for a channel reason), ``delivering``, or ``unknown``
        (nothing delivered or lost for a channel reason yet)."""
        if self.failing or self.consecutive:
            return "failing"
        return "delivering" if self.last_ok_at is not None else "unknown"

    def to_dict(self) -> dict[str, object]:
        """For the status document (``daemon.alerts.channels[]``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "state": self.state,
            "undelivered": self.undelivered,
            "consecutive_failures": self.consecutive,
            "last_ok_at": self.last_ok_at,
            "last_failure_at": self.last_failure_at,
            "last_failure_reason": self.last_failure_reason,
            "last_failure_detail": self.last_failure_detail,
        }


def failing(channel: str, kind: str, d: Delivery) -> Alert:
    """``alerts.failing``: ``channel`` lost a message (``d``) for a reason of its own."""
    why = describe(d.reason, d.detail)
    return Alert(
        "warning",
        f"alert channel {channel} failing: {why}",
        "delivering",
        "failing",
        f'"{d.title}" ({d.profile}) was not delivered to {channel}; every undelivered alert is in '
        "`supervisorctl events supervisor` (alert.undelivered)",
        details=(("channel", f"{channel} ({kind})"),),
        kind="alerts.failing",
        params=(("channel", channel), ("why", why)),
        condition=condition_for(channel),
    )


def delivering(channel: str, lost: int) -> Alert:
    """``alerts.delivering``: ``channel`` delivered again after losing ``lost`` messages."""
    what = "1 message was" if lost == 1 else f"{lost} messages were"
    return Alert(
        "info",
        f"alert channel {channel} delivering again; {what} lost meanwhile",
        "failing",
        "delivering",
        "see `supervisorctl events supervisor` (alert.undelivered) for what was lost",
        kind="alerts.delivering",
        params=(("channel", channel), ("lost", str(lost))),
        condition=condition_for(channel),
        resolves=True,
    )

"""The only code that sends alerts to chat channels.

:class:`AlertSender` posts each alert to every configured chat channel from one bounded background
thread; ``send`` never blocks the daemon loop. One wrapper (:func:`~supervisor.adapters.webhook.deliver`)
makes every request: transient failures (connection error, timeout, 429, 5xx, a platform's rate-limit
code) are retried with capped backoff, permanent ones (other 4xx, a platform error code in a 200) are not.
Nothing is lost silently: what became of every queued message on every channel, and every message given
up on (after its retries, dropped on overflow, lost at shutdown, a channel without a readable URL), is
reported to ``on_delivery`` (the daemon records and counts it: supervisor/daemon/alert_health.py). URLs,
tokens and signing secrets are never logged or reported: the channel's name and kind, the HTTP status
and a short scrubbed detail only.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from supervisor.adapters.secrets import inline_or_file
from supervisor.adapters.webhook import Outcome, attempt, deliver
from supervisor.config.model import AlertChannel
from supervisor.core import alert_channels as AC
from supervisor.core.actions import Alert
from supervisor.core.alert_channels import Delivery
from supervisor.core.alert_payloads import build_request
from supervisor.core.alerts import AlertMessage, Deduper, message_from_alert, test_message
from supervisor.core.clock import Clock

__all__ = ["AlertSender", "ChannelResult", "Outcome", "attempt", "channel_label", "deliver"]

log = structlog.get_logger("supervisor.notify")

MAX_QUEUE = 100


@dataclass(frozen=True)
class ChannelResult:
    """The outcome of delivering one message to one channel (no URL, no token)."""

    name: str
    kind: str
    ok: bool
    detail: str
    reason: str = ""  # when not ok: why (supervisor.core.alert_channels.REASONS)


@dataclass(frozen=True)
class _Queued:
    """A queued message, with its catalogue id and condition (for the reports) and a channel to skip."""

    msg: AlertMessage
    kind: str = ""
    condition: str | None = None
    skip: str | None = None  # a failing channel is not sent the alert about itself


def channel_label(channel: AlertChannel) -> str:
    """The name to show for a channel: its configured name, else its kind."""
    return channel.name or channel.kind


class AlertSender:
    """Alerts to every channel from a bounded background sender; see the module docstring."""

    def __init__(
        self,
        channels: tuple[AlertChannel, ...],
        dedupe_s: float,
        clock: Clock,
        timeout_s: float = 10.0,
        *,
        max_queue: int = MAX_QUEUE,
        tries: int = 3,
        backoff_s: tuple[float, ...] = (1.0, 4.0),
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], object] | None = None,
        host: str | None = None,
        on_result: Callable[[str, bool], None] | None = None,
        on_delivery: Callable[[Delivery], None] | None = None,
        language: str = "en",
    ) -> None:
        self._channels = channels
        self.language = language  # alerts.language: the cards' titles, labels and "what to do"
        self._on_result = on_result  # told (channel, ok) per queued delivery (metrics); must not raise
        # told every queued message's fate per channel, and every message given up on (any thread)
        self._on_delivery = on_delivery
        self._clock = clock
        self._timeout = timeout_s
        self._max_queue = max(1, max_queue)
        self._tries = tries
        self._backoff = backoff_s
        self._max_backoff = max_backoff_s
        self._give_up = threading.Event()  # set when close() times out: stop waiting between tries
        self._sleep: Callable[[float], object] = sleep or self._give_up.wait
        self.host = host or socket.gethostname()
        self._deduper = Deduper(dedupe_s)
        self._queue: deque[_Queued] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # ---- producer side (daemon loop) ------------------------------------------------------------

    def send(
        self, msg: AlertMessage, *, kind: str = "", condition: str | None = None, skip: str | None = None
    ) -> bool:
        """Queue ``msg`` for every channel but ``skip`` (never blocks); False when deduplicated or closed.

        ``kind`` and ``condition`` (the alert's catalogue id and condition) go into the reports."""
        item = _Queued(msg, kind, condition, skip)
        with self._cond:
            closed = self._closed
            queued, dropped = (False, None) if closed else self._enqueue(item)
        if closed:
            log.warning("alert.dropped_closed", profile=msg.profile, title=msg.title)
            self._lost(item, AC.CLOSED)
        if dropped is not None:
            self._lost(dropped, AC.QUEUE_OVERFLOW)
        return queued

    def _enqueue(self, item: _Queued) -> tuple[bool, _Queued | None]:
        """(queued?, the message dropped to make room); under the lock."""
        msg = item.msg
        decision, self._deduper = self._deduper.decide(msg, self._clock.monotonic())
        if not decision.send:
            log.info("alert.deduplicated", profile=msg.profile, title=msg.title)
            return False, None
        if decision.suppressed_before:
            repeats = ("repeats suppressed", str(decision.suppressed_before))
            item = replace(item, msg=replace(msg, details=(*msg.details, repeats)))
        if not self._channels:
            return False, None
        dropped = None
        if len(self._queue) >= self._max_queue:
            dropped = self._queue.popleft()
            old = dropped.msg
            log.warning("alert.queue_overflow", dropped_profile=old.profile, dropped_title=old.title)
        self._queue.append(item)
        self._ensure_thread()
        self._cond.notify_all()
        return True, dropped

    def alert(
        self,
        profile: str,
        alert: Alert,
        diagnosis: str | None = None,
        details: tuple[tuple[str, str], ...] = (),
    ) -> bool:
        """``send`` the message for a state machine ``Alert`` of ``profile`` (host and time filled in)."""
        msg = message_from_alert(
            profile, alert, host=self.host, at=self._clock.now(), diagnosis=diagnosis, details=details
        )
        skip = None if alert.resolves else AC.about_channel(alert.condition)  # not told it is failing
        return self.send(msg, kind=alert.kind, condition=alert.condition, skip=skip)

    def pending(self) -> int:
        """Messages queued or being sent."""
        with self._cond:
            return len(self._queue) + (1 if self._busy else 0)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until everything queued was attempted; True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Stop accepting, deliver what is queued for up to ``timeout`` s; True if all was attempted."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            self._give_up.set()
            with self._cond:
                lost = list(self._queue)
                self._queue.clear()
            log.warning("alert.close_timeout", undelivered=len(lost))
            for item in lost:
                self._lost(item, AC.CLOSE_TIMEOUT)
            return False
        return True

    # ---- synchronous test (supervisorctl test-alert) --------------------------------------------

    def test(self, now: float, msg: AlertMessage | None = None) -> list[ChannelResult]:
        """Send a test message to every channel now (no dedupe, no queue); one result per channel."""
        message = msg or test_message(self.host, now)
        return [self._deliver_one(ch, message) for ch in self._channels]

    # ---- sender thread --------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="alert-sender", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closed)
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._busy = True
            try:
                for ch in self._channels:
                    if channel_label(ch) == item.skip:
                        continue
                    result = self._guarded(ch, item.msg)
                    if self._on_result is not None:
                        self._on_result(result.name, result.ok)
                    self._report(item, result)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _guarded(self, ch: AlertChannel, msg: AlertMessage) -> ChannelResult:
        """:meth:`_deliver_one`, and a bug in building a message costs that message, not the thread."""
        try:
            return self._deliver_one(ch, msg)
        except Exception as exc:  # the sender thread must survive to send the next one
            log.exception("alert.send_crashed", channel=channel_label(ch), kind=ch.kind)
            return ChannelResult(channel_label(ch), ch.kind, False, type(exc).__name__, AC.INTERNAL_ERROR)

    def _deliver_one(self, ch: AlertChannel, msg: AlertMessage) -> ChannelResult:
        name = channel_label(ch)
        try:
            url = inline_or_file(ch.url, ch.url_file)
            secret = inline_or_file(ch.secret, ch.secret_file)
        except OSError as exc:
            log.error("alert.channel_unreadable", channel=name, kind=ch.kind, error=type(exc).__name__)
            why = f"url/secret file unreadable ({type(exc).__name__})"
            return ChannelResult(name, ch.kind, False, why, AC.UNREADABLE)
        if not url:
            log.error("alert.channel_unconfigured", channel=name, kind=ch.kind)
            return ChannelResult(name, ch.kind, False, "no URL configured", AC.UNCONFIGURED)
        if ch.kind == "telegram" and not ch.chat_id:
            log.error("alert.channel_unconfigured", channel=name, kind=ch.kind, missing="chat_id")
            return ChannelResult(name, ch.kind, False, "no chat_id configured", AC.UNCONFIGURED)

        def on_retry(o: Outcome, n: int, delay: float) -> None:
            log.warning("alert.retry", channel=name, kind=ch.kind, attempt=n, detail=o.detail, delay_s=delay)

        outcome = deliver(
            lambda: build_request(
                ch.kind, url, secret, ch.chat_id, msg, self._clock.now(), ch.language or self.language
            ),
            kind=ch.kind,
            secret=secret,
            timeout=self._timeout,
            tries=self._tries,
            backoff_s=self._backoff,
            max_backoff_s=self._max_backoff,
            sleep=self._sleep,
            on_retry=on_retry,
        )
        if outcome.ok:
            log.info("alert.sent", channel=name, kind=ch.kind, profile=msg.profile, status=outcome.status)
        else:
            log.error(
                "alert.failed",
                channel=name,
                kind=ch.kind,
                profile=msg.profile,
                status=outcome.status,
                detail=outcome.detail,
                transient=outcome.transient,
                attempts=outcome.attempts,
            )
        reason = "" if outcome.ok else AC.RETRIES_EXHAUSTED if outcome.transient else AC.REJECTED
        return ChannelResult(name, ch.kind, outcome.ok, outcome.detail, reason)

    # ---- reports (nothing lost silently) --------------------------------------------------------

    def _report(self, item: _Queued, result: ChannelResult) -> None:
        """Tell ``on_delivery`` what became of ``item`` on one channel (never raises)."""
        if self._on_delivery is None:
            return
        msg = item.msg
        d = Delivery(
            result.name,
            result.kind,
            result.ok,
            result.reason,
            result.detail,
            msg.title,
            item.kind,
            msg.profile,
            item.condition,
        )
        try:
            self._on_delivery(d)
        except Exception as exc:  # noqa: BLE001 - a report must never stop the sender
            log.error("alert.report_failed", channel=result.name, error=type(exc).__name__)

    def _lost(self, item: _Queued, reason: str) -> None:
        """``item`` will not be delivered to any channel (overflow, shutdown): one report per channel."""
        detail = AC.describe(reason, "")
        for ch in self._channels:
            if channel_label(ch) != item.skip:
                self._report(item, ChannelResult(channel_label(ch), ch.kind, False, detail, reason))

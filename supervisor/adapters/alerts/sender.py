"""The only code that sends alerts to chat channels.

:class:`AlertSender` posts each alert to every configured chat channel; each channel has its own bounded
queue and background thread (:class:`~supervisor.adapters.alerts.worker.ChannelWorker`), so a dead or slow
channel delays only its own messages; ``send`` never blocks the daemon loop. One wrapper
(:func:`~supervisor.adapters.alerts.webhook.deliver`) makes every request: transient failures (connection
error,
timeout, 429, 5xx, a platform's rate-limit code) are retried with capped backoff, permanent ones (other
4xx, a platform error code in a 200) are not.
Nothing is lost silently: what became of every queued message on every channel, and every message given
up on (after its retries, dropped on overflow, lost at shutdown, a channel without a readable URL), is
reported to ``on_delivery`` (the daemon posts it to the fleet step, which counts and alerts it:
supervisor/core/fleet/step.py ``channel_report``).
URLs,
tokens and signing secrets are never logged or reported: the channel's name and kind, the HTTP status
and a short scrubbed detail only. Every message passes ``redact`` just before its payload is built (the
daemon's :class:`~supervisor.adapters.secrets.SecretBook`; by default the secret shapes of
:mod:`supervisor.core.spec.secrets`), so no known secret value reaches a chat.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import structlog

from supervisor.adapters.alerts.webhook import Outcome, attempt, deliver
from supervisor.adapters.alerts.worker import ChannelWorker
from supervisor.adapters.secrets import inline_or_file
from supervisor.config.model import AlertChannel
from supervisor.core.actions import Alert
from supervisor.core.alerts import channels as AC
from supervisor.core.alerts.channels import Delivery
from supervisor.core.alerts.message import AlertMessage, Deduper, message_from_alert, test_message
from supervisor.core.alerts.payloads import build_request
from supervisor.core.clock import Clock
from supervisor.core.spec.secrets import Redactor

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
    reason: str = ""  # when not ok: why (supervisor.core.alerts.channels.REASONS)


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
    """Alerts to every channel, one bounded background worker per channel; see the module docstring."""

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
        redact: Callable[[AlertMessage], AlertMessage] | None = None,
    ) -> None:
        self._channels = channels
        self._redact = redact or Redactor().data  # applied to every message before it is sent
        self.language = language  # alerts.language: the cards' titles, labels and "what to do"
        # told (channel, ok) per queued delivery (metrics; from any channel's thread); must not raise
        self._on_result = on_result
        # told every queued message's fate per channel, and every message given up on (any thread)
        self._on_delivery = on_delivery
        self._clock = clock
        self._timeout = timeout_s
        self._tries = tries
        self._backoff = backoff_s
        self._max_backoff = max_backoff_s
        self._give_up = threading.Event()  # set when close() times out: stop waiting between tries
        self._sleep: Callable[[float], object] = sleep or self._give_up.wait
        self.host = host or socket.gethostname()
        self._deduper = Deduper(dedupe_s)
        self._lock = threading.Lock()  # the deduper and closed; taken before a worker's own lock
        self._closed = False
        self._workers = [
            (ch, ChannelWorker[_Queued](channel_label(ch), max_queue, partial(self._handle, ch)))
            for ch in channels
        ]

    # ---- producer side (daemon loop) ------------------------------------------------------------

    def send(
        self, msg: AlertMessage, *, kind: str = "", condition: str | None = None, skip: str | None = None
    ) -> bool:
        """Queue ``msg`` for every channel but ``skip`` (never blocks); False when deduplicated, closed
        or there is no channel to send it to.

        ``kind`` and ``condition`` (the alert's catalogue id and condition) go into the reports."""
        item = _Queued(msg, kind, condition, skip)
        dropped: list[tuple[AlertChannel, _Queued]] = []
        with self._lock:
            closed = self._closed
            if not closed:
                to_send = self._dedupe(item)
                if to_send is None:
                    return False
                for ch, worker in self._workers:
                    if channel_label(ch) != skip and (old := worker.put(to_send)) is not None:
                        dropped.append((ch, old))
        if closed:
            log.warning("alert.dropped_closed", profile=msg.profile, title=msg.title)
            self._lost(item, AC.CLOSED)
            return False
        for ch, old in dropped:  # reported outside the lock: a report may raise an alert (send again)
            log.warning(
                "alert.queue_overflow",
                channel=channel_label(ch),
                dropped_profile=old.msg.profile,
                dropped_title=old.msg.title,
            )
            self._lost(old, AC.QUEUE_OVERFLOW, (ch,))
        return any(channel_label(ch) != skip for ch in self._channels)

    def _dedupe(self, item: _Queued) -> _Queued | None:
        """``item`` to send (with its suppressed repeats counted), None when deduplicated; under the lock."""
        msg = item.msg
        decision, self._deduper = self._deduper.decide(msg, self._clock.monotonic())
        if not decision.send:
            log.info("alert.deduplicated", profile=msg.profile, title=msg.title)
            return None
        if decision.suppressed_before:
            repeats = ("repeats suppressed", str(decision.suppressed_before))
            item = replace(item, msg=replace(msg, details=(*msg.details, repeats)))
        return item

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
        """Deliveries queued or being sent, summed over the channels (one message to 3 channels: 3)."""
        return sum(worker.pending() for _ch, worker in self._workers)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s (in all) until every channel attempted everything queued; True if so."""
        deadline = time.monotonic() + timeout
        return all(worker.wait_idle(deadline - time.monotonic()) for _ch, worker in self._workers)

    def close(self, timeout: float = 10.0) -> bool:
        """Stop accepting, deliver what is queued for up to ``timeout`` s in all (every channel at once);
        True if all was attempted. What is still queued then is reported lost on its channel."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            for _ch, worker in self._workers:
                worker.close()
        late = [(ch, w) for ch, w in self._workers if not w.join(deadline - time.monotonic())]
        if not late:
            return True
        lost = [(ch, worker.drain()) for ch, worker in late]  # before the give-up: none is started now
        self._give_up.set()  # the messages being sent end their backoff now
        for ch, items in lost:
            log.warning("alert.close_timeout", channel=channel_label(ch), undelivered=len(items))
            for item in items:
                self._lost(item, AC.CLOSE_TIMEOUT, (ch,))
        return False

    # ---- synchronous test (supervisorctl test-alert) --------------------------------------------

    def test(self, now: float, msg: AlertMessage | None = None) -> list[ChannelResult]:
        """Send a test message to every channel now (no dedupe, no queue); one result per channel."""
        message = msg or test_message(self.host, now)
        return [self._deliver_one(ch, message) for ch in self._channels]

    # ---- a channel's worker thread ---------------------------------------------------------------

    def _handle(self, ch: AlertChannel, item: _Queued) -> None:
        """Deliver ``item`` to ``ch`` and report it (on ``ch``'s worker thread)."""
        result = self._guarded(ch, item.msg)
        if self._on_result is not None:
            self._on_result(result.name, result.ok)
        self._report(item, result)

    def _guarded(self, ch: AlertChannel, msg: AlertMessage) -> ChannelResult:
        """:meth:`_deliver_one`, and a bug in building a message costs that message, not the thread."""
        try:
            return self._deliver_one(ch, msg)
        except Exception as exc:  # the sender thread must survive to send the next one
            log.exception("alert.send_crashed", channel=channel_label(ch), kind=ch.kind)
            return ChannelResult(channel_label(ch), ch.kind, False, type(exc).__name__, AC.INTERNAL_ERROR)

    def _deliver_one(self, ch: AlertChannel, msg: AlertMessage) -> ChannelResult:
        name = channel_label(ch)
        msg = self._redact(msg)
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
            proxy=ch.proxy,
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

    def _lost(self, item: _Queued, reason: str, channels: tuple[AlertChannel, ...] | None = None) -> None:
        """``item`` will not be delivered to ``channels`` (default all; overflow, shutdown): one report
        per channel."""
        detail = AC.describe(reason, "")
        for ch in self._channels if channels is None else channels:
            if channel_label(ch) != item.skip:
                self._report(item, ChannelResult(channel_label(ch), ch.kind, False, detail, reason))

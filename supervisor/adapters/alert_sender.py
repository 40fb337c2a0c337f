"""The only code that sends alerts and heartbeats over HTTP (``requests``).

:class:`AlertSender` posts each alert to every configured chat channel from one bounded background
thread; ``send`` never blocks the daemon loop. One wrapper (:func:`deliver`) makes every request:
transient failures (connection error, timeout, 429, 5xx, a platform's rate-limit code) are retried
with capped backoff, permanent ones (other 4xx, a platform error code in a 200) are not.
:class:`Heartbeat` pings a dead-man-switch URL (healthchecks.io style) so that an outside service
notices when the daemon stops. URLs, tokens and signing secrets are never logged or returned: events
carry the channel's name and kind, the HTTP status and a short error kind only.
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import requests
import structlog

from supervisor.adapters.secrets import inline_or_file
from supervisor.config.model import AlertChannel
from supervisor.core.actions import Alert
from supervisor.core.alert_payloads import build_request
from supervisor.core.alerts import AlertMessage, Deduper, message_from_alert, test_message
from supervisor.core.clock import Clock

log = structlog.get_logger("supervisor.notify")

MAX_QUEUE = 100
# Codes a platform returns in a 200 body when it only asks us to slow down (retry later).
_RATE_LIMIT_CODES = {"feishu": {11232}, "dingtalk": {130101}, "wecom": {45009}}
_DETAIL_MAX = 160


@dataclass(frozen=True)
class ChannelResult:
    """The outcome of delivering one message to one channel (no URL, no token)."""

    name: str
    kind: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Outcome:
    """One delivery (after retries): ok, whether the last failure was transient, a safe detail."""

    ok: bool
    transient: bool
    detail: str
    status: int | None = None
    attempts: int = 1
    retry_after: float | None = None


def channel_label(channel: AlertChannel) -> str:
    """The name to show for a channel: its configured name, else its kind."""
    return channel.name or channel.kind


def _scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` (one line, bounded) with every secret-bearing string replaced by ``***``."""
    out = " ".join(text.split())
    for s in secrets:
        if s and len(s) >= 4:
            out = out.replace(s, "***")
    return out[:_DETAIL_MAX]


def _secret_parts(url: str, secret: str | None) -> list[str | None]:
    """The URL and every piece of it that may be a token (path segments, query values), the secret."""
    parts = urllib.parse.urlsplit(url)
    values = [v for _k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    segments = [seg for seg in parts.path.split("/") if seg]
    # longest first, so that a URL is replaced as a whole before its pieces
    return sorted([url, secret, parts.path, parts.query, *segments, *values], key=lambda s: -len(s or ""))


def _error_kind(exc: requests.RequestException) -> str:
    """A fixed description of a requests exception (its message contains the URL: never used)."""
    if isinstance(exc, requests.exceptions.Timeout):
        return "timeout"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "connection error"
    return type(exc).__name__


def _platform_error(kind: str, resp: requests.Response) -> tuple[str, bool] | None:
    """(detail, transient) when a 2xx body carries the platform's own error code, else None."""
    if kind not in ("feishu", "dingtalk", "wecom", "telegram"):
        return None
    try:
        data: Any = resp.json()
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if kind == "telegram":
        if data.get("ok") is False:
            code = data.get("error_code")
            return f"telegram error {code}: {data.get('description', '')}", code == 429
        return None
    raw_code = data.get("code", data.get("StatusCode")) if kind == "feishu" else data.get("errcode")
    message = data.get("msg", data.get("StatusMessage")) if kind == "feishu" else data.get("errmsg")
    if raw_code in (None, 0, "0"):
        return None
    try:
        code = int(raw_code)
    except (TypeError, ValueError):
        return f"{kind} error {raw_code!s}", False
    return f"{kind} error {code}: {message or ''}", code in _RATE_LIMIT_CODES.get(kind, set())


def _retry_after(resp: requests.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def attempt(
    method: str,
    url: str,
    *,
    kind: str,
    timeout: float,
    secret: str | None = None,
    json_body: dict[str, Any] | None = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Outcome:
    """One HTTP request, classified: ok / transient / permanent, with a detail free of secrets."""
    secrets = _secret_parts(url, secret)
    try:
        resp = requests.request(method, url, json=json_body, data=data, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        return Outcome(False, True, _error_kind(exc))
    with resp:
        status = resp.status_code
        if status == 429 or status >= 500:
            return Outcome(False, True, f"HTTP {status}", status, retry_after=_retry_after(resp))
        if not 200 <= status < 300:
            return Outcome(False, False, f"HTTP {status}", status)
        err = _platform_error(kind, resp)
        if err is not None:
            detail, transient = err
            return Outcome(False, transient, _scrub(f"HTTP {status}, {detail}", secrets), status)
        return Outcome(True, False, f"HTTP {status}", status)


def deliver(
    make_request: Callable[[], tuple[str, dict[str, Any]]],
    *,
    kind: str,
    secret: str | None,
    timeout: float,
    tries: int = 3,
    backoff_s: tuple[float, ...] = (1.0, 4.0),
    max_backoff_s: float = 30.0,
    sleep: Callable[[float], object],
    on_retry: Callable[[Outcome, int, float], None] | None = None,
) -> Outcome:
    """POST ``make_request()`` (rebuilt per try: signatures carry a timestamp), retrying transient
    failures up to ``tries`` times in all with capped backoff (a 429's Retry-After is honoured up to
    ``max_backoff_s``)."""
    outcome = Outcome(False, True, "not attempted", attempts=0)
    for n in range(1, max(1, tries) + 1):
        url, body = make_request()
        outcome = attempt("POST", url, kind=kind, timeout=timeout, secret=secret, json_body=body)
        outcome = Outcome(
            outcome.ok, outcome.transient, outcome.detail, outcome.status, n, outcome.retry_after
        )
        if outcome.ok or not outcome.transient or n >= tries:
            return outcome
        delay = backoff_s[min(n - 1, len(backoff_s) - 1)] if backoff_s else 0.0
        if outcome.retry_after is not None:
            delay = max(delay, outcome.retry_after)
        delay = min(delay, max_backoff_s)
        if on_retry is not None:
            on_retry(outcome, n, delay)
        sleep(delay)
    return outcome


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
        language: str = "en",
    ) -> None:
        self._channels = channels
        self.language = language  # alerts.language: the cards' titles, labels and "what to do"
        self._on_result = on_result  # told (channel, ok) per queued delivery (metrics); must not raise
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
        self._queue: deque[AlertMessage] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # ---- producer side (daemon loop) ------------------------------------------------------------

    def send(self, msg: AlertMessage) -> bool:
        """Queue ``msg`` for every channel (never blocks); False when deduplicated or closed."""
        with self._cond:
            if self._closed:
                log.warning("alert.dropped_closed", profile=msg.profile, title=msg.title)
                return False
            decision, self._deduper = self._deduper.decide(msg, self._clock.monotonic())
            if not decision.send:
                log.info("alert.deduplicated", profile=msg.profile, title=msg.title)
                return False
            if decision.suppressed_before:
                repeats = ("repeats suppressed", str(decision.suppressed_before))
                msg = replace(msg, details=(*msg.details, repeats))
            if not self._channels:
                return False
            if len(self._queue) >= self._max_queue:
                old = self._queue.popleft()
                log.warning("alert.queue_overflow", dropped_profile=old.profile, dropped_title=old.title)
            self._queue.append(msg)
            self._ensure_thread()
            self._cond.notify_all()
            return True

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
        return self.send(msg)

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
                lost = len(self._queue)
                self._queue.clear()
            log.warning("alert.close_timeout", undelivered=lost)
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
                msg = self._queue.popleft()
                self._busy = True
            try:
                for ch in self._channels:
                    result = self._deliver_one(ch, msg)
                    if self._on_result is not None:
                        self._on_result(result.name, result.ok)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _deliver_one(self, ch: AlertChannel, msg: AlertMessage) -> ChannelResult:
        name = channel_label(ch)
        try:
            url = inline_or_file(ch.url, ch.url_file)
            secret = inline_or_file(ch.secret, ch.secret_file)
        except OSError as exc:
            log.error("alert.channel_unreadable", channel=name, kind=ch.kind, error=type(exc).__name__)
            return ChannelResult(name, ch.kind, False, f"url/secret file unreadable ({type(exc).__name__})")
        if not url:
            log.error("alert.channel_unconfigured", channel=name, kind=ch.kind)
            return ChannelResult(name, ch.kind, False, "no URL configured")
        if ch.kind == "telegram" and not ch.chat_id:
            log.error("alert.channel_unconfigured", channel=name, kind=ch.kind, missing="chat_id")
            return ChannelResult(name, ch.kind, False, "no chat_id configured")

        def on_retry(o: Outcome, n: int, delay: float) -> None:
            log.warning("alert.retry", channel=name, kind=ch.kind, attempt=n, detail=o.detail, delay_s=delay)

        outcome = deliver(
            lambda: build_request(ch.kind, url, secret, ch.chat_id, msg, self._clock.now(), self.language),
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
        return ChannelResult(name, ch.kind, outcome.ok, outcome.detail)

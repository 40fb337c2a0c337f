"""The dead-man heartbeat: a periodic ping an external service expects (it alerts when pings stop), sent
to a failure URL when the daemon says not all is well (core/fleet/heartbeat.py decides). The summary it
POSTs passes ``redact`` (the daemon's secret book) like every alert."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

import structlog

from supervisor.adapters.alerts.sender import Outcome, attempt
from supervisor.adapters.secrets import inline_or_file
from supervisor.config.model import HeartbeatConfig
from supervisor.core.clock import Clock
from supervisor.core.spec.secrets import Redactor

log = structlog.get_logger("supervisor.heartbeat")

#: A ping whose verdict differs from the last one's goes out at once, but never sooner than this after it.
FLIP_GAP_S = 10.0


def with_path(url: str, suffix: str) -> str:
    """``url`` with ``suffix`` appended to its path, query and fragment kept (``…/<uuid>/fail``)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + suffix))


class Heartbeat:
    """Dead-man switch: POST a short summary to the heartbeat URL every ``interval_s``.

    The receiver (healthchecks.io, Uptime Kuma push, cronitor...) alerts when pings stop, which is
    exactly what an in-process alert cannot do when the daemon or host is dead. ``beat`` is
    synchronous (bounded by ``timeout_s`` x 2 tries): call it off the daemon loop.
    """

    def __init__(
        self,
        config: HeartbeatConfig,
        clock: Clock,
        timeout_s: float = 10.0,
        retry_s: float = 60.0,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self._config = config
        self._redact = redact or Redactor().text
        self._clock = clock
        self._timeout = timeout_s
        self._retry_s = retry_s
        self._last: float | None = None
        self._last_ok = False
        self._last_failing: bool | None = None

    @property
    def enabled(self) -> bool:
        """Whether a heartbeat URL is configured."""
        return self._config.enabled

    def due(self, now: float | None = None, failing: bool | None = None) -> bool:
        """Whether a ping is due at monotonic ``now`` (sooner after a failed ping, and at once — at most
        every ``FLIP_GAP_S`` — when the verdict ``failing`` differs from the last ping's)."""
        if not self.enabled:
            return False
        if self._last is None:
            return True
        t = self._clock.monotonic() if now is None else now
        if self._config.fails and failing is not None and failing != self._last_failing:
            return t - self._last >= FLIP_GAP_S
        wait = self._config.interval_s if self._last_ok else min(self._config.interval_s, self._retry_s)
        return t - self._last >= wait

    def _url(self, failing: bool) -> str | None:
        """The URL to ping: the failure URL when ``failing`` (fail_url, else url + fail_path)."""
        cfg = self._config
        if failing:
            fail = inline_or_file(cfg.fail_url, cfg.fail_url_file)
            if fail:
                return fail
        url = inline_or_file(cfg.url, cfg.url_file)
        return with_path(url, cfg.fail_path) if failing and url and cfg.fail_path else url

    def beat(self, summary: str, failing: bool = False) -> bool:
        """POST ``summary`` (UTF-8 text, at most 10 kB) to the URL, or the failure URL when ``failing``;
        True on a 2xx answer."""
        self._last = self._clock.monotonic()
        self._last_failing = failing
        try:
            url = self._url(failing)
        except OSError as exc:
            log.error("heartbeat.failed", detail=f"url_file unreadable ({type(exc).__name__})")
            self._last_ok = False
            return False
        if not url:
            log.error("heartbeat.failed", detail="no URL configured")
            self._last_ok = False
            return False
        body = self._redact(summary).encode("utf-8")[:10_000]
        outcome = Outcome(False, True, "not attempted", attempts=0)
        for n in (1, 2):
            outcome = attempt(
                "POST",
                url,
                kind="heartbeat",
                timeout=self._timeout,
                data=body,
                headers={"Content-Type": "text/plain; charset=utf-8"},
            )
            if outcome.ok or not outcome.transient:
                break
            log.warning("heartbeat.retry", attempt=n, detail=outcome.detail)
        self._last_ok = outcome.ok
        if outcome.ok:
            log.info("heartbeat.sent", status=outcome.status, failing=failing)
        else:
            log.error("heartbeat.failed", status=outcome.status, detail=outcome.detail, failing=failing)
        return outcome.ok

"""The dead-man heartbeat: a periodic ping an external service expects (it alerts when pings stop)."""

from __future__ import annotations

import structlog

from supervisor.adapters.alert_sender import Outcome, attempt
from supervisor.adapters.secrets import inline_or_file
from supervisor.config.model import HeartbeatConfig
from supervisor.core.clock import Clock

log = structlog.get_logger("supervisor.heartbeat")


class Heartbeat:
    """Dead-man switch: POST a short summary to the heartbeat URL every ``interval_s``.

    The receiver (healthchecks.io, Uptime Kuma push, cronitor...) alerts when pings stop, which is
    exactly what an in-process alert cannot do when the daemon or host is dead. ``beat`` is
    synchronous (bounded by ``timeout_s`` x 2 tries): call it off the daemon loop.
    """

    def __init__(
        self, config: HeartbeatConfig, clock: Clock, timeout_s: float = 10.0, retry_s: float = 60.0
    ) -> None:
        self._config = config
        self._clock = clock
        self._timeout = timeout_s
        self._retry_s = retry_s
        self._last: float | None = None
        self._last_ok = False

    @property
    def enabled(self) -> bool:
        """Whether a heartbeat URL is configured."""
        return self._config.enabled

    def due(self, now: float | None = None) -> bool:
        """Whether a ping is due at monotonic ``now`` (sooner after a failed ping)."""
        if not self.enabled:
            return False
        if self._last is None:
            return True
        t = self._clock.monotonic() if now is None else now
        wait = self._config.interval_s if self._last_ok else min(self._config.interval_s, self._retry_s)
        return t - self._last >= wait

    def beat(self, summary: str) -> bool:
        """POST ``summary`` (UTF-8 text, at most 10 kB) to the URL; True on a 2xx answer."""
        self._last = self._clock.monotonic()
        try:
            url = inline_or_file(self._config.url, self._config.url_file)
        except OSError as exc:
            log.error("heartbeat.failed", detail=f"url_file unreadable ({type(exc).__name__})")
            self._last_ok = False
            return False
        if not url:
            log.error("heartbeat.failed", detail="no URL configured")
            self._last_ok = False
            return False
        body = summary.encode("utf-8")[:10_000]
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
            log.info("heartbeat.sent", status=outcome.status)
        else:
            log.error("heartbeat.failed", status=outcome.status, detail=outcome.detail)
        return outcome.ok

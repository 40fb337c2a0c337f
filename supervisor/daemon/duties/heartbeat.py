"""The heartbeat in the daemon: every tick the loop tells the serving watch the profiles' states; when a
ping is due (every ``heartbeat.interval_s``, or at once when the verdict flips) it goes out on a thread
of its own (the HTTP call never waits on the loop), to the failure URL when the verdict is FAIL.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

import structlog

from supervisor import __version__
from supervisor.adapters.alerts.heartbeat import Heartbeat
from supervisor.core.fleet.heartbeat import ServingWatch
from supervisor.core.profile_state import ProfileState

log = structlog.get_logger("supervisor.heartbeat")


class HeartbeatDuty:
    """The dead-man heartbeat with its verdict (core/fleet/heartbeat.py)."""

    def __init__(self, heartbeat: Heartbeat, fail_after_s: float) -> None:
        self.heartbeat = heartbeat
        self.watch = ServingWatch(fail_after_s)
        self._failing: bool | None = None
        self._thread: threading.Thread | None = None

    def tick(self, states: Mapping[str, ProfileState], now: float, status_line: str) -> None:
        """Observe the states; ping when due (on the loop: no I/O here)."""
        hb = self.heartbeat
        if not hb.enabled:
            return
        self.watch = self.watch.observe(states, now)
        verdict = self.watch.verdict(states, now)
        if verdict.failing != self._failing:
            self._failing = verdict.failing
            if verdict.failing:
                log.warning("heartbeat.verdict_failing", reasons=list(verdict.reasons))
            else:
                log.info("heartbeat.verdict_ok")
        busy = self._thread is not None and self._thread.is_alive()
        if busy or not hb.due(failing=verdict.failing):
            return
        body = verdict.body(f"vllm-supervisor {__version__} pid {os.getpid()}", status_line)
        self._thread = threading.Thread(
            target=hb.beat, args=(body, verdict.failing), name="heartbeat", daemon=True
        )
        self._thread.start()

"""The daily digest in the daemon: ``alerts.digest_at`` ("HH:MM") in the maintenance schedule's time zone
(``maintenance.timezone``; the host's zone when unset). The loop checks the time each tick; at the fire
time a pool job reads the start ledger and MemAvailable, composes the text (core/fleet/digest.py) and
sends it.

A fire missed while the daemon was down is not caught up: at start the next fire is the first ``HH:MM``
after now (a digest is a summary, not an obligation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from supervisor.adapters.host import system as host
from supervisor.adapters.store.state import Store
from supervisor.core.alerts.message import iso_local
from supervisor.core.errors import HostError, StateError
from supervisor.core.fleet.digest import digest_alert, next_daily, parse_hhmm
from supervisor.core.maintenance.schedule import ScheduleError, zone
from supervisor.core.profile_state import ProfileState
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.digest")

#: Newest ledger rows per profile the digest looks through for the last 24 h.
LEDGER_ROWS = 500
#: Runs ``fn(*args)`` on the executor's pool, one job of ``kind`` at a time (``Effects.background``).
Background = Callable[..., None]


class DigestDuty:
    """When the next digest is due, and the pool job that sends it."""

    def __init__(
        self,
        digest_at: str | None,
        timezone: str | None,
        store: Store,
        records: Records,
        background: Background,
    ) -> None:
        self._at = parse_hhmm(digest_at) if digest_at else None
        self._store = store
        self._records = records
        self._background = background
        self._tz = None
        if self._at is not None:
            try:
                self._tz = zone(timezone)
            except ScheduleError as exc:  # the config check refuses this; never a daemon crash
                log.error("digest.timezone_unknown", error=str(exc))
                self._at = None
        self.next_fire: float | None = None

    def start(self, now: float) -> None:
        """At daemon start: the first fire after ``now`` (a missed one is not caught up)."""
        if self._at is not None and self._tz is not None:
            self.next_fire = next_daily(now, self._at, self._tz)
            log.info("digest.scheduled", next=iso_local(self.next_fire))

    def tick(
        self,
        now: float,
        states: Mapping[str, ProfileState],
        next_maintenance: str | None,
        uptime_s: float,
    ) -> None:
        """On the loop each tick: at the fire time, hand the digest to the pool (no I/O here)."""
        if self.next_fire is None or now < self.next_fire or self._at is None or self._tz is None:
            return
        self.next_fire = next_daily(now, self._at, self._tz)
        self._background("digest", self.send, dict(states), now, next_maintenance, uptime_s)

    def send(
        self,
        states: Mapping[str, ProfileState],
        now: float,
        next_maintenance: str | None,
        uptime_s: float,
    ) -> None:
        """The pool job: read the ledger and MemAvailable, send the digest."""
        ledger = {}
        for name in states:
            try:
                ledger[name] = self._store.read_starts(name, n=LEDGER_ROWS)
            except StateError as exc:
                log.error("store.read_failed", what="starts", error=str(exc))
                ledger[name] = []
        perf = {}
        for name in states:  # the sentinel's canaries (docs/sentinel.md)
            try:
                perf[name] = self._store.read_perf(name, n=LEDGER_ROWS)
            except StateError as exc:
                log.error("store.read_failed", what="perf", error=str(exc))
        try:
            mem: float | None = host.mem_available_gib()
        except (HostError, OSError, ValueError):
            mem = None
        alert = digest_alert(
            states,
            ledger,
            now,
            mem_available_gib=mem,
            next_maintenance=next_maintenance,
            uptime_s=uptime_s,
            perf=perf,
        )
        self._records.daemon_alert(alert)

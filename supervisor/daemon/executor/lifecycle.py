"""The daemon's own life: the alive record in the state directory and the start, stop and crash messages
(when every profile was looked at is the fleet step's to say: ``Announce``, core/fleet/tick.py).

``alive.json`` (:class:`~supervisor.core.fleet.lifecycle.AliveRecord`) is written at start, refreshed every
``ALIVE_EVERY_S`` by a thread of its own (an atomic write with fsync never waits on the loop), and
written a last time with ``clean_stop: true`` on a clean shutdown. At the next start a record without
the flag means the previous run died (SIGKILL, crash, watchdog, power cut): ``daemon.crashed`` says
from when to when no supervisor ran. A missing or corrupt record claims nothing (a log line only).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from supervisor import __version__
from supervisor.adapters.host import system as host
from supervisor.adapters.host.watchdog import devices as watchdog_devices
from supervisor.adapters.store.state import Store
from supervisor.adapters.threads import Supervised, checkpoint, supervised
from supervisor.core.clock import Clock
from supervisor.core.errors import HostError, StateError
from supervisor.core.fleet.lifecycle import (
    ALIVE_EVERY_S,
    AliveRecord,
    PreviousRun,
    crashed_alert,
    previous_run,
    started_alert,
    stopped_alert,
)
from supervisor.core.fleet.night import Night, night_story, previous_boot_note
from supervisor.core.host.kernel_log import classify_kernel_line
from supervisor.core.host.watchdog import reset_by_watchdog
from supervisor.core.profile_state import ProfileState
from supervisor.daemon.executor.records import Records

log = structlog.get_logger("supervisor.daemon")


def _booted_at() -> float | None:
    try:
        return host.boot_time()
    except (HostError, OSError, RuntimeError):
        return None


class Lifecycle:
    """Keeps the alive record and says when the daemon started, stopped, or had crashed before."""

    def __init__(
        self,
        store: Store,
        records: Records,
        clock: Clock,
        *,
        every_s: float = ALIVE_EVERY_S,
        flight: Callable[[], list[dict[str, Any]]] | None = None,
        previous_kernel: Callable[[], list[str]] | None = None,
    ) -> None:
        self._store = store
        self._records = records
        self._clock = clock
        self._every = every_s
        self._flight = flight  # the previous run's flight records (read once, at begin)
        self._previous_kernel = previous_kernel  # the previous boot's kernel log (journalctl -k -b -1)
        self.night: Night | None = None
        self._lock = threading.Lock()
        self._record: AliveRecord | None = None
        self._write_failing = False
        self.previous: PreviousRun | None = None
        self._stop = threading.Event()
        self._thread: Supervised | None = None

    # ---- start ------------------------------------------------------------------------------------

    def begin(self, boot_id: str | None) -> None:
        """At daemon start: judge the previous run (a crash is reported now), then write this run's record
        and start refreshing it."""
        now = self._clock.now()
        try:
            data = self._store.load_alive()
            prev = AliveRecord.from_dict(data) if data is not None else None
        except StateError as exc:  # moved aside by the store: no claim about the previous run
            log.error("daemon.alive_unreadable", error=str(exc))
            prev = None
        self.previous = previous_run(prev, now, boot_id, _booted_at())
        p = self.previous
        if p is not None and p.crashed:
            fields: dict[str, object] = {
                "last_alive": p.last_alive,
                "down_s": round(p.down_s, 1),
                "rebooted": p.rebooted,
                "error": p.error,
            }
            self.night = self._story(p)
            if self.night is not None:
                fields |= {
                    "story": self.night.text,
                    "last_record": self.night.last_t,
                    "up": list(self.night.up),
                }
            self._records.emit("", "daemon.crashed", fields)
            self._records.daemon_alert(crashed_alert(p, self.night.text if self.night else None))
        self._record = AliveRecord(os.getpid(), now, now, boot_id, version=__version__)
        self._write()
        self._thread = supervised("alive", self._refresh, self._stop)

    def _story(self, p: PreviousRun) -> Night | None:
        """The flight recorder's account of the previous run's end (None: no recorder, no records)."""
        if self._flight is None:
            return None
        try:
            night = night_story(self._flight(), rebooted=p.rebooted, back_at=p.now)
        except (OSError, ValueError, TypeError, KeyError) as exc:  # a damaged record: no story, no crash
            log.error("flight.story_failed", error=repr(exc))
            night = None
        note = None
        if p.rebooted and self._previous_kernel is not None:
            note = previous_boot_note(self._previous_kernel(), classify_kernel_line)
        if p.rebooted:  # a watchdog that reset the host says so in its bootstatus (docs/wedge.md)
            reset = reset_by_watchdog(watchdog_devices())
            note = "; ".join(n for n in (reset, note) if n) or None
        if note is None:
            return night
        if night is None:
            return Night(note, p.last_alive, (), None, None, None)
        return replace(night, text=f"{night.text}; {note}")

    def wedged_at(self) -> float | None:
        """When the host went down under the previous run (its last flight record, else its last sign of
        life), if it did: an unclean end with a reboot. None otherwise."""
        p = self.previous
        if p is None or not p.crashed or not p.rebooted:
            return None
        return self.night.last_t if self.night is not None else p.last_alive

    def announce(self, states: Mapping[str, ProfileState], waited_s: float) -> None:
        """Every profile's container was looked at, or the settle timeout passed (the fleet step decides
        when, core/fleet/tick.py): ``daemon.settled`` and the ``daemon.started`` message."""
        alert = started_alert(
            states, self._clock.now(), version=__version__, pid=os.getpid(), previous=self.previous
        )
        self._records.emit("", "daemon.settled", {"waited_s": round(waited_s, 1), "summary": alert.reason})
        self._records.daemon_alert(alert)

    # ---- stop -------------------------------------------------------------------------------------

    def end(self, states: Mapping[str, ProfileState], uptime_s: float, error: BaseException | None) -> None:
        """At shutdown (``error``: the exception ending the run, None on a clean stop): on a clean stop send
        ``daemon.stopped`` (the caller then closes the sender, which delivers it within its bounded wait);
        write the record a last time, with the clean-stop flag or the error."""
        clean = error is None
        why = f"{type(error).__name__}: {error}"[:300] if error is not None else None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._record is None:
            return  # never began: the previous run's record stays as it was
        if clean:
            self._records.daemon_alert(stopped_alert(states, uptime_s, version=__version__, pid=os.getpid()))
        with self._lock:
            self._record = replace(
                self._record, last_alive=self._clock.now(), clean_stop=clean, exit_error=why
            )
        self._write()

    # ---- the record -------------------------------------------------------------------------------

    def _refresh(self) -> None:
        while not self._stop.wait(self._every):
            checkpoint("alive")
            with self._lock:
                if self._record is not None:
                    self._record = replace(self._record, last_alive=self._clock.now())
            self._write()

    def _write(self) -> None:
        with self._lock:
            record = self._record
            if record is None:
                return
            try:
                self._store.save_alive(record.to_dict())
            except StateError as exc:  # reported once, until a write succeeds again
                if not self._write_failing:
                    log.error("daemon.alive_write_failed", error=str(exc))
                self._write_failing = True
                return
            if self._write_failing:
                log.info("daemon.alive_write_ok")
            self._write_failing = False

"""The flight recorder: the last ~10 minutes of host memory, profile states, kernel lines and emergencies,
kept in the state directory for the morning after a hard reboot (docs/wedge.md).

The loop only queues (``sample`` once a second with the profiles' states; ``observe_event`` is the history's
observer; ``saw`` takes the probe rounds' request counts on their way to the inbox). A thread of its own
reads /proc/meminfo and memory PSI, writes the records (supervisor/adapters/store/flight_recorder.py) and
fsyncs at most once every 2 s, so a slow disk on a dying host never holds up the loop. Bounded: a queue
of at most QUEUE_MAX records (the oldest dropped first), the files at most 1 MiB. A recorder that cannot
write says so once (log) and the daemon goes on without it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from supervisor.adapters.host import pressure, system as host
from supervisor.adapters.host.buddyinfo import read_contiguity
from supervisor.adapters.store.flight_recorder import FlightFiles, read_records
from supervisor.adapters.threads import Supervised, checkpoint, supervised
from supervisor.core.clock import Clock
from supervisor.core.errors import HostError
from supervisor.core.events import Event, ProbeRound
from supervisor.core.host.flight import FSYNC_EVERY_S, event_record

log = structlog.get_logger("supervisor.flight")

GIB = 1024.0**3
QUEUE_MAX = 2000
#: The thread wakes at least this often (a deferred fsync is done on such a wake).
WAKE_S = 1.0


def host_sample() -> dict[str, Any]:
    """MemAvailable, MemFree, swap used (GiB), memory PSI [some avg10, full avg10] and free contiguous
    memory (/proc/buddyinfo) now."""
    info = host.read_meminfo()
    psi = pressure.read_psi()
    used, _total = pressure.swap_in_use(info)
    ps = None
    if psi is not None:
        ps = [psi.some.avg10, psi.full.avg10 if psi.full is not None else None]
    c = read_contiguity()
    return {
        "ma": round(info.get("MemAvailable", 0) / GIB, 3),
        "mf": round(info.get("MemFree", 0) / GIB, 3),
        "su": round(used / GIB, 3),
        "ps": ps,
        # /proc/buddyinfo: free memory in blocks >= 4 MiB (in 4 MiB blocks), the largest free block (MiB)
        "hb": c.free_blocks if c is not None else None,
        "hl": c.largest_bytes >> 20 if c is not None else None,
    }


class FlightDuty:
    """Queues records on the loop, writes them on a thread of its own."""

    def __init__(
        self, directory: Path, clock: Clock, sample: Callable[[], dict[str, Any]] = host_sample
    ) -> None:
        self.directory = directory
        self._clock = clock
        self._sample = sample
        self._queue: deque[dict[str, Any]] = deque(maxlen=QUEUE_MAX)
        self._requests: dict[str, tuple[float | None, float | None, float | None]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Supervised | None = None
        self._files: FlightFiles | None = None
        self.error: str | None = None
        self.written = 0

    def previous(self) -> list[dict[str, Any]]:
        """The records the previous run left (read before this run writes any)."""
        return read_records(self.directory)

    def start(self) -> None:
        try:
            self._files = FlightFiles(self.directory, self._clock.monotonic)
        except OSError as exc:
            self.error = f"flight recorder off: {exc.strerror or exc}"
            log.error("flight.unavailable", error=self.error, directory=str(self.directory))
            return
        self._thread = supervised("flight", self._run, self._stop)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)

    # ---- the loop's side (cheap, never waits) -----------------------------------------------------

    def sample(self, states: Mapping[str, str]) -> None:
        """Once a second (the fleet step's ``FlightSample``): the profiles' states and request counts (the
        host is read by the thread)."""
        profiles = {}
        for name, state in states.items():
            running, waiting, watts = self._requests.get(name, (None, None, None))
            profiles[name] = [state, running, waiting, watts]
        self._put({"t": round(self._clock.now(), 3), "k": "s", "p": profiles})

    def saw(self, profile: str, event: Event) -> None:
        """An event on its way to the inbox (any thread): a probe round's request counts are kept."""
        if isinstance(event, ProbeRound):
            watts = round(event.gpu_power_w, 1) if event.gpu_power_w is not None else None
            self._requests[profile] = (event.requests_running, event.requests_waiting, watts)

    def observe_event(self, profile: str, name: str, fields: Mapping[str, Any]) -> None:
        """The history's observer: kernel lines and emergencies are recorded (and written at once)."""
        rec = event_record(round(self._clock.now(), 3), profile, name, dict(fields))
        if rec is not None:
            self._put(rec)

    def _put(self, rec: dict[str, Any]) -> None:
        if self._thread is not None:
            self._queue.append(rec)
            self._wake.set()

    # ---- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        files = self._files
        assert files is not None
        try:
            while not self._stop.is_set():
                self._wake.wait(WAKE_S)
                self._wake.clear()
                checkpoint("flight")
                self._drain(files)
                files.sync()
        except OSError as exc:
            self.error = f"flight recorder stopped: {exc.strerror or exc}"
            log.error("flight.write_failed", error=self.error)
        finally:
            self._drain_quietly(files)

    def _drain(self, files: FlightFiles) -> None:
        while self._queue:
            rec = self._queue.popleft()
            if rec.get("k") == "s":
                try:
                    rec |= self._sample()
                except HostError as exc:
                    rec["err"] = str(exc)[:200]
            files.append(rec)
            self.written += 1

    def _drain_quietly(self, files: FlightFiles) -> None:
        try:
            self._drain(files)
            files.close()
        except OSError as exc:
            log.error("flight.close_failed", error=str(exc))

    def status(self) -> dict[str, Any]:
        """For the status document."""
        files = self._files
        return {
            "directory": str(self.directory),
            "records_written": self.written,
            "bytes": files.size() if files is not None else 0,
            "fsyncs": files.fsyncs if files is not None else 0,
            "fsync_every_s": FSYNC_EVERY_S,
            "error": self.error,
        }

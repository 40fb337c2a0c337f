"""The flight recorder's files: a ring of two segment files in the state directory (``flight/``).

Records (supervisor/core/host/flight.py) are appended to the active segment with one ``write`` each;
when it would pass ``SEGMENT_MAX_BYTES`` or spans ``SEGMENT_SPAN_S``, the other segment is truncated
and becomes the active one: the two hold the last 5-10 minutes and never more than 1 MiB together.
``sync`` fsyncs at most once every ``FSYNC_EVERY_S``. A torn write loses only the torn line: on
open, a segment that does not end in a newline gets one, so the next record starts a line of its own.
Not thread-safe: one writer (the recorder thread, supervisor/daemon/executor/flight.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from supervisor.core.host.flight import (
    FSYNC_EVERY_S,
    SEGMENT_MAX_BYTES,
    SEGMENT_SPAN_S,
    decode_all,
    encode,
)

log = structlog.get_logger("supervisor.flight")

NAMES = ("flight.0.jsonl", "flight.1.jsonl")


def read_records(directory: Path) -> list[dict[str, Any]]:
    """Every intact record of both segments, oldest first (empty when there are none)."""
    out: list[dict[str, Any]] = []
    for name in NAMES:
        try:
            out += decode_all((directory / name).read_bytes())
        except OSError:
            continue
    out.sort(key=lambda r: float(r["t"]))
    return out


class FlightFiles:
    """The two segments; ``append`` a record, ``sync`` when due, ``close`` at the end."""

    def __init__(self, directory: Path, monotonic: Callable[[], float]) -> None:
        self.directory = directory
        self._mono = monotonic
        directory.mkdir(parents=True, exist_ok=True)
        self._active, first = self._pick()
        path = directory / NAMES[self._active]
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._size = os.fstat(self._fd).st_size
        if self._size and path.read_bytes()[-1:] != b"\n":
            self._size += os.write(self._fd, b"\n")  # after a torn write: the next record starts clean
        self._first_t = first
        self._dirty = False
        self._synced_at = -FSYNC_EVERY_S
        self.fsyncs = 0

    def _pick(self) -> tuple[int, float | None]:
        """The segment holding the newest record (and its first record's time); 0 when both are empty."""
        best, best_t, first = 0, float("-inf"), None
        for i, name in enumerate(NAMES):
            try:
                recs = decode_all((self.directory / name).read_bytes())
            except OSError:
                continue
            if recs and float(recs[-1]["t"]) > best_t:
                best, best_t, first = i, float(recs[-1]["t"]), float(recs[0]["t"])
        return best, first

    def append(self, record: dict[str, Any]) -> None:
        """Append one record (rotating first when the active segment is full or old enough)."""
        line = encode(record)
        t = float(record["t"])
        old = self._first_t is not None and t - self._first_t >= SEGMENT_SPAN_S
        if self._size + len(line) > SEGMENT_MAX_BYTES or old:
            self._rotate()
        if self._first_t is None:
            self._first_t = t
        self._size += os.write(self._fd, line)
        self._dirty = True

    def _rotate(self) -> None:
        self.sync()  # when due (the fsync pace holds; an undue tail is left to the kernel's writeback)
        os.close(self._fd)
        self._active = 1 - self._active
        path = self.directory / NAMES[self._active]
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._size = 0
        self._first_t = None

    def sync(self) -> None:
        """fsync the active segment if anything was written and the last fsync is FSYNC_EVERY_S old."""
        if self._dirty and self._mono() - self._synced_at >= FSYNC_EVERY_S:
            self._fsync()

    def _fsync(self) -> None:
        os.fsync(self._fd)
        self._synced_at = self._mono()
        self._dirty = False
        self.fsyncs += 1

    def size(self) -> int:
        """Bytes in both segments."""
        total = 0
        for name in NAMES:
            try:
                total += (self.directory / name).stat().st_size
            except OSError:
                continue
        return total

    def close(self) -> None:
        if self._dirty:
            self._fsync()
        os.close(self._fd)

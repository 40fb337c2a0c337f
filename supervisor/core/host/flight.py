"""The flight recorder's record format and bounds (pure; the files:
supervisor/adapters/store/flight_recorder.py).

One record is one line: compact JSON, a tab, the CRC-32 of the JSON as 8 hex digits, a newline. A torn
write (power cut, hard reboot mid-write) leaves at most the last line of the active segment incomplete
or wrong: its checksum fails and only it is dropped; every older line is intact.

Record kinds (``k``), all with ``t`` (epoch seconds):

* ``s`` - a sample, every second: ``ma`` MemAvailable GiB, ``mf`` MemFree GiB, ``su`` swap used GiB,
  ``ps`` memory PSI ``[some avg10, full avg10]`` (null without PSI), ``p`` profile -> ``[state,
  requests running, requests waiting]`` (null counts when not known);
* ``kernel`` - a kernel line of interest: ``kind``, ``line``, ``whose`` (profile -> ours|other|nobody);
* ``ev`` - a history event of interest (emergency, memory guard, exit, failed start, state change):
  ``p`` profile, ``n`` name, ``f`` a few fields.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

#: Two segments of at most this many bytes each: the ring never holds more than 1 MiB.
SEGMENT_MAX_BYTES = 512 * 1024
#: A segment is closed after this long, so the two hold the last 5-10 minutes.
SEGMENT_SPAN_S = 300.0
#: At most one fsync this often (the records written meanwhile are in the page cache).
FSYNC_EVERY_S = 2.0
#: A single record is cut to this many bytes of JSON (a flood of long lines cannot blow the ring).
RECORD_MAX_BYTES = 2048
#: History events the recorder keeps (the per-second sample has the states).
EVENTS = frozenset(
    {
        "emergency.kill",
        "emergency.stop",
        "engine.stack",
        "memory.pressure",
        "memory.hard_floor",
        "container.exited",
        "container.died",
        "start.failed",
        "daemon.crashed",
        "state.changed",
    }
)
#: The fields of those events worth keeping.
EVENT_FIELDS = ("reason", "cause", "state", "new", "detail", "exit_code", "outcome", "container_id")


def encode(record: dict[str, Any]) -> bytes:
    """One line: JSON, tab, CRC-32 (hex), newline. Over-long records lose their longest strings' tails."""
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
    if len(text.encode()) > RECORD_MAX_BYTES:
        cut = {k: (v[:300] if isinstance(v, str) else v) for k, v in record.items()}
        text = json.dumps(cut, separators=(",", ":"), ensure_ascii=False, default=str)
        if len(text.encode()) > RECORD_MAX_BYTES:
            text = json.dumps({"t": record.get("t"), "k": record.get("k"), "cut": True})
    data = text.encode()
    return data + b"\t" + f"{zlib.crc32(data):08x}".encode() + b"\n"


def decode(line: bytes) -> dict[str, Any] | None:
    """The record of one line, or None (torn, corrupt, not ours)."""
    body, sep, crc = line.rstrip(b"\n").rpartition(b"\t")
    if not sep or len(crc) != 8:
        return None
    try:
        if int(crc, 16) != zlib.crc32(body):
            return None
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("t"), int | float):
        return None
    return value


def decode_all(data: bytes) -> list[dict[str, Any]]:
    """Every intact record in a segment's bytes (in file order)."""
    out = []
    for line in data.split(b"\n"):
        rec = decode(line) if line else None
        if rec is not None:
            out.append(rec)
    return out


def event_record(t: float, profile: str, name: str, fields: dict[str, Any]) -> dict[str, Any] | None:
    """The record of a history event of interest, or None for any other event."""
    kernel = not profile and name.startswith("kernel.")  # (a profile's kernel.while_serving is not one)
    if name not in EVENTS and not kernel:
        return None
    if kernel:
        kept = {"kind": name[len("kernel.") :], "line": str(fields.get("line", ""))[:500]}
        return {"t": t, "k": "kernel", **kept, "whose": fields.get("whose"), "kt": fields.get("kernel_ts")}
    small = {k: fields[k] for k in EVENT_FIELDS if fields.get(k) is not None}
    return {"t": t, "k": "ev", "p": profile, "n": name, "f": small}

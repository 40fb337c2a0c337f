"""The kernel log's record formats and the follower's position and events (the parsing half of
:mod:`supervisor.adapters.kernel_log.follower`, which follows the log in a thread).

``/dev/kmsg`` yields one record per ``read()``: ``prio,seq,usec,flags[,...];message\\n`` followed by
optional continuation lines; ``dmesg --follow --raw`` prints ``<prio>[ uptime] message``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from supervisor.core.host.attribution import PidLookup

_DMESG_LINE = re.compile(r"^<(?P<prio>\d+)>\[\s*(?P<s>\d+)\.(?P<us>\d{1,6})\]\s?(?P<msg>.*)$")


@dataclass(frozen=True)
class KmsgPosition:
    """Where the follower got to: the boot, the last record's seq (None from dmesg) and its kernel time."""

    boot_id: str
    seq: int | None
    usec: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form for the caller's state file."""
        return {"boot_id": self.boot_id, "seq": self.seq, "usec": self.usec}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KmsgPosition | None:
        """The position saved by :meth:`to_dict`, or None when it is malformed (start fresh)."""
        bid, seq, usec = data.get("boot_id"), data.get("seq"), data.get("usec")
        if not isinstance(bid, str) or not isinstance(usec, int) or not (seq is None or isinstance(seq, int)):
            return None
        return cls(bid, seq, usec)


@dataclass(frozen=True)
class KernelLogEvent:
    """One classified kernel message with where (seq) and when (epoch seconds) it was logged."""

    kind: str
    xid: int | None
    pci: str | None
    pid: int | None
    proc_name: str | None
    seq: int | None  # None when read through dmesg
    usec: int  # kernel timestamp, microseconds since boot
    ts: float  # wall clock (epoch seconds), see wall_clock_of
    line: str  # the message without record prefix
    raw: str  # the record or dmesg line as read (first line only)
    #: The victim's cgroup as the OOM killer printed it (its ``oom-kill:`` line): None when not seen.
    cgroup: str | None = None
    #: The pid looked up when the follower read the line (alive, its container): None when no pid. Taken at
    #: once, because the process may be gone (or its pid reused) by the time anyone asks whose it was.
    lookup: PidLookup | None = None
    #: Read before the follower first caught up with the log: printed before this daemon read it (a restart,
    #: a position from another boot). Recorded, never judged against a container (core/host/kernel_rule.py).
    backlog: bool = False


def parse_record(data: bytes) -> tuple[int, int, int, str] | None:
    """(prio, seq, usec, message) of one /dev/kmsg record; None for a malformed one."""
    text = data.decode("utf-8", "replace")
    header, sep, body = text.partition(";")
    fields = header.split(",")
    if not sep or len(fields) < 3:
        return None
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    return prio, seq, usec, body.split("\n", 1)[0]


def parse_dmesg_raw(line: str) -> tuple[int, int, str] | None:
    """(prio, usec, message) of one ``dmesg --raw`` line; None for anything else."""
    m = _DMESG_LINE.match(line.rstrip("\r\n"))
    if m is None:
        return None
    usec = int(m.group("s")) * 1_000_000 + int(m.group("us").ljust(6, "0"))
    return int(m.group("prio")), usec, m.group("msg")


def wall_clock_of(usec: int) -> float:
    """Epoch seconds of a kernel timestamp: boot time (now minus CLOCK_MONOTONIC) + usec.

    printk stamps come from the kernel's local clock, which like CLOCK_MONOTONIC does not run during
    suspend; so this is exact to a few ms, also after a suspend, unlike btime of /proc/stat + usec
    (whole seconds, and off by the time spent suspended).
    """
    return time.time() - time.monotonic() + usec / 1e6


def lost_between(last_seq: int | None, seq: int) -> int:
    """How many records were skipped between the last handled seq and this one (0 without a last)."""
    if last_seq is None:
        return 0
    return max(seq - last_seq - 1, 0)

"""``/proc/buddyinfo`` read for the contiguity sentinel (supervisor/core/host/contiguity.py): one small read,
no waiting; None when the file cannot be read (not Linux, a container without /proc)."""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.core.host.contiguity import Contiguity, measure, parse_buddyinfo

BUDDYINFO = Path("/proc/buddyinfo")


def page_size() -> int:
    """The kernel's page size in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE"))


def read_contiguity(path: Path = BUDDYINFO, page: int | None = None) -> Contiguity | None:
    """Free contiguous memory now, from ``path`` (a recorded buddyinfo file in tests); None: unreadable."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    zones = parse_buddyinfo(text)
    if not zones:
        return None
    return measure(zones, page if page is not None else page_size())

"""``/proc/buddyinfo`` read for the contiguity sentinel (supervisor/core/host/contiguity.py): one small read,
no waiting; None when the file cannot be read (not Linux, a container without /proc).

Test seam: ``VSUP_BUDDYINFO=/path/to/file`` makes the daemon read that file instead of ``/proc/buddyinfo``
(every read: the start's preflight and the host sampler). It exists for tests and the bench's
``low_contiguity_before_start`` rows, which cannot fragment a shared host's memory safely; a production
daemon never sets it (docs/wedge.md "The contiguity sentinel")."""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.core.host.contiguity import Contiguity, measure, parse_buddyinfo

BUDDYINFO = Path("/proc/buddyinfo")
#: The test seam's environment variable (module docstring).
BUDDYINFO_ENV = "VSUP_BUDDYINFO"


def buddyinfo_path() -> Path:
    """The file the daemon reads: ``/proc/buddyinfo``, or the test seam's file."""
    return Path(os.environ.get(BUDDYINFO_ENV) or BUDDYINFO)


def page_size() -> int:
    """The kernel's page size in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE"))


def read_contiguity(path: Path | None = None, page: int | None = None) -> Contiguity | None:
    """Free contiguous memory now, from ``path`` (a recorded buddyinfo file in tests; default
    :func:`buddyinfo_path`); None: unreadable."""
    try:
        text = (path or buddyinfo_path()).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    zones = parse_buddyinfo(text)
    if not zones:
        return None
    return measure(zones, page if page is not None else page_size())

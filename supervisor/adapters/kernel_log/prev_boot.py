"""The previous boot's kernel log, when the journal kept it (``journalctl -k -b -1``): read once, at the
first start after a hard reboot, for the morning-after message (docs/wedge.md). Bounded: at most
``LINES`` lines, ``TIMEOUT_S`` seconds, ``MAX_BYTES`` bytes; any failure (no journalctl, no persistent
journal, no previous boot) is simply no lines.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from supervisor.core.log_events import cap_line

LINES = 5000
TIMEOUT_S = 5.0
MAX_BYTES = 4 << 20
JOURNAL_CMD: tuple[str, ...] = ("journalctl", "-k", "-b", "-1", "-o", "short-iso", "--no-pager", "-q")


def previous_boot_kernel(cmd: Sequence[str] = JOURNAL_CMD, timeout_s: float = TIMEOUT_S) -> list[str]:
    """The last lines of the previous boot's kernel log (empty when there is none to read)."""
    try:
        done = subprocess.run(
            [*cmd, "-n", str(LINES)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [cap_line(x) for x in done.stdout[-MAX_BYTES:].decode("utf-8", "replace").splitlines()[-LINES:]]

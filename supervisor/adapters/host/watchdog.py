"""What this host says about its hardware watchdog (supervisor/core/host/watchdog.py): systemd's
``RuntimeWatchdogUSec`` (``systemctl show``, bounded) and ``/sys/class/watchdog/*``. Every failure is
"unknown" or "none", never an exception."""

from __future__ import annotations

import subprocess
from pathlib import Path

from supervisor.core.host.paths import SYSTEMD_CONF_D as PATHS_CONF_D
from supervisor.core.host.watchdog import WatchdogFacts

SYS_WATCHDOG = Path("/sys/class/watchdog")
SYSTEMD_CONF_D = PATHS_CONF_D
TIMEOUT_S = 5.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def devices(root: Path = SYS_WATCHDOG) -> tuple[tuple[str, str, int | None], ...]:
    """(device, identity, bootstatus) of every watchdog the kernel registered."""
    out: list[tuple[str, str, int | None]] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return ()
    for d in entries:
        status = _read(d / "bootstatus")
        try:
            boot = int(status, 0) if status else None
        except ValueError:
            boot = None
        out.append((d.name, _read(d / "identity") or "", boot))
    return tuple(out)


def runtime_usec() -> int | None:
    """systemd's RuntimeWatchdogUSec (0: off; None: not systemd or no answer)."""
    try:
        done = subprocess.run(
            ["systemctl", "show", "-p", "RuntimeWatchdogUSec", "--value"],
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.decode("ascii", "replace").strip()
    if done.returncode != 0 or not text:
        return None
    if text in ("infinity",):
        return 2**63 - 1
    if text.isdigit():
        return int(text)
    return _parse_timespan(text)


def _parse_timespan(text: str) -> int | None:
    """systemd prints the property as a timespan ("1min", "30s", "0") on newer versions."""
    units = {"us": 1, "ms": 1000, "s": 1_000_000, "min": 60_000_000, "h": 3_600_000_000}
    total = 0
    for part in text.split():
        num = part.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = part[len(num) :] or "s"
        if not num.replace(".", "", 1).isdigit() or unit not in units:
            return None
        total += int(float(num) * units[unit])
    return total


def facts(root: Path = SYS_WATCHDOG) -> WatchdogFacts:
    """What systemd and /sys say now."""
    return WatchdogFacts(runtime_usec(), devices(root))

"""Wedge insurance (docs/wedge.md "Wedge insurance"): will a hardware watchdog reset this host if it wedges?
Pure: what systemd and /sys said in, a verdict and the files to write out.

A wedged GB10 or Thor answers nothing (no OOM kill, no panic, an empty pstore): the supervisor cannot act
from inside it. Only a hardware watchdog resets it: systemd pets ``/dev/watchdog`` every half
``RuntimeWatchdogSec`` while PID 1 runs; when the kernel wedges the petting stops and the timer resets the
machine. ``RuntimeWatchdogSec`` is off by default; the Jetson's own watchdog is armed only when something
opens it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: systemd's manager drop-in the ``init --hardware-watchdog`` writes (``uninit`` removes it).
DROPIN_NAME: Final = "90-vllm-supervisor-watchdog.conf"
MARKER: Final = "# written by vllm-supervisor init --hardware-watchdog (docs/wedge.md); uninit removes it"
#: The Linux watchdog API's "the last reboot was caused by the watchdog" bit of ``bootstatus``.
WDIOF_CARDRESET: Final = 0x0020
MIN_S: Final = 10
MAX_S: Final = 600


@dataclass(frozen=True)
class WatchdogFacts:
    """What the host said: systemd's ``RuntimeWatchdogUSec`` (None: unknown; 0: off) and the watchdog
    devices (``/sys/class/watchdog/<dev>``: name, identity, bootstatus)."""

    runtime_usec: int | None
    devices: tuple[tuple[str, str, int | None], ...]  # (device, identity, bootstatus)


def verdict(f: WatchdogFacts) -> tuple[bool, str]:
    """``(armed, one line for check-config and init)``."""
    devs = ", ".join(f"/dev/{d} ({ident or 'unknown'})" for d, ident, _ in f.devices)
    if not f.devices:
        return False, (
            "hardware watchdog: none on this host (no /sys/class/watchdog device): a wedged host stays down "
            "until someone power-cycles it"
        )
    if f.runtime_usec is None:
        return False, (
            f"hardware watchdog: {devs} present; systemd's RuntimeWatchdogSec could not be read: a wedged "
            "host is reset only if something else pets the watchdog"
        )
    if f.runtime_usec <= 0 or f.runtime_usec >= 2**63 - 1:
        return False, (
            f"hardware watchdog: {devs} present but systemd does not arm it (RuntimeWatchdogSec off): a "
            "wedged host stays down; `supervisorctl init --hardware-watchdog 60` arms it"
        )
    return True, (
        f"hardware watchdog: armed by systemd (RuntimeWatchdogSec {f.runtime_usec / 1e6:g} s, {devs}): "
        "a wedged host resets itself"
    )


def dropin(seconds: int) -> str:
    """The systemd manager drop-in that arms the hardware watchdog (``/etc/systemd/system.conf.d/``)."""
    if not MIN_S <= seconds <= MAX_S:
        raise ValueError(f"--hardware-watchdog: {seconds} s is outside {MIN_S}..{MAX_S}")
    return f"{MARKER}\n[Manager]\nRuntimeWatchdogSec={seconds}s\nRebootWatchdogSec=10min\n"


def reset_by_watchdog(devices: tuple[tuple[str, str, int | None], ...]) -> str | None:
    """The morning-after note when a device says the last reboot was its doing (None: none does)."""
    hit = [d for d, _, status in devices if status is not None and status & WDIOF_CARDRESET]
    if not hit:
        return None
    return f"the hardware watchdog reset the host (/dev/{hit[0]} bootstatus: card reset)"

"""systemd notify protocol (sd_notify) over the datagram socket in $NOTIFY_SOCKET; stdlib only.

A no-op when the daemon does not run under systemd (no NOTIFY_SOCKET). A failed send is logged and
reported as False; it never raises, because losing a status line must not stop the supervisor.
The daemon should call :meth:`SystemdNotifier.watchdog` every ``watchdog_interval_s() / 2`` seconds.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)


def _address(raw: str) -> str | None:
    if raw.startswith("@"):
        return "\0" + raw[1:]  # abstract namespace
    if raw.startswith("/"):
        return raw
    return None  # vsock: and other schemes are not supported


class SystemdNotifier:
    """Sends READY/STATUS/WATCHDOG/STOPPING to systemd."""

    def __init__(self, address: str | None, environ: Mapping[str, str] | None = None) -> None:
        self._address = address
        self._environ: Mapping[str, str] = os.environ if environ is None else environ

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SystemdNotifier:
        """A notifier for $NOTIFY_SOCKET ('@' = abstract namespace); inactive when unset or unsupported."""
        env: Mapping[str, str] = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        address = _address(raw) if raw else None
        if raw and address is None:
            log.warning("systemd.notify.unsupported_socket", socket=raw)
        return cls(address, env)

    @property
    def enabled(self) -> bool:
        """True when running under systemd with a usable notify socket."""
        return self._address is not None

    def notify(self, message: str) -> bool:
        """Send one raw notify message; True if sent (False when inactive or on error)."""
        if self._address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(2.0)
                sock.connect(self._address)
                sock.sendall(message.encode("utf-8"))
        except OSError as exc:
            log.warning(
                "systemd.notify.failed", error=exc.strerror or str(exc), message=message.partition("=")[0]
            )
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd that start-up is complete (``Type=notify``)."""
        return self.notify("READY=1" + (f"\nSTATUS={_one_line(status)}" if status else ""))

    def status(self, text: str) -> bool:
        """Set the status line shown by ``systemctl status``."""
        return self.notify(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        """Ping the watchdog (``WatchdogSec``)."""
        return self.notify("WATCHDOG=1")

    def stopping(self) -> bool:
        """Tell systemd that shutdown has begun."""
        return self.notify("STOPPING=1")

    def watchdog_interval_s(self) -> float | None:
        """The watchdog timeout from WATCHDOG_USEC (None if unset, invalid, or meant for another pid)."""
        return watchdog_interval_s(self._environ)


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """WATCHDOG_USEC in seconds, honouring WATCHDOG_PID (must be this process when set)."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    usec, pid = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
    if not usec:
        return None
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1_000_000 if value > 0 else None


def _one_line(text: str) -> str:
    return " ".join(text.split())

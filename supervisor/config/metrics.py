"""The daemon config's ``metrics:`` section: where the Prometheus endpoint listens (off when absent)."""

from __future__ import annotations

import ipaddress

from supervisor.config.model import MetricsConfig
from supervisor.config.reader import Section

_LOOPBACK_NAMES = ("localhost",)


def split_listen(text: str, *, ephemeral: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) -> (host, port); ValueError saying what is wrong.

    Port 0 (any free port) only with ``ephemeral`` (tests): Prometheus needs a fixed port to scrape.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host:
        raise ValueError("must be HOST:PORT, e.g. 127.0.0.1:9400")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError("an IPv6 host must be written in brackets, e.g. [::1]:9400")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("an IPv6 host must be written in brackets, e.g. [::1]:9400")
    if not port_text.isdigit() or not (0 if ephemeral else 1) <= int(port_text) <= 65535:
        raise ValueError("the port must be a number from 1 to 65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_metrics(sec: Section, present: bool) -> MetricsConfig | None:
    """The ``metrics:`` section (None when absent: no endpoint); problems go to ``sec.ctx``."""
    if not present or not sec.ok:
        return None
    listen = sec.str_("listen", None) if sec.required("listen") else None
    allow_remote = sec.bool_("allow_remote", False)
    sec.done()
    if listen is None:
        return None
    try:
        host, port = split_listen(listen)
    except ValueError as exc:
        sec.bad("listen", str(exc), listen)
        return None
    if not allow_remote and not is_loopback(host):
        sec.bad(
            "listen",
            "is not a loopback address: the endpoint has no authentication; set allow_remote: true to "
            "serve it to other machines (firewall it to the Prometheus server)",
            listen,
        )
        return None
    return MetricsConfig(host=host, port=port, allow_remote=allow_remote)

"""What every ``supervisorctl`` command shares: the socket path, the exit codes, one call-and-report.

Exit codes: 0 ok / every profile that should run is RUNNING, 1 the daemon (or an offline tool) reported
an error, 2 usage or a missing component, 3 a profile that should run is not RUNNING (``status``),
4 daemon unreachable, 5 the awaited start failed and 6 it timed out (``--wait``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from supervisor.adapters.control.client import ControlClient
from supervisor.core.errors import ControlError
from supervisor.core.host.paths import DEFAULT_CONFIG, DEFAULT_SOCKET, SOCKET_ENV

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["DEFAULT_CONFIG", "DEFAULT_SOCKET", "SOCKET_ENV"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
#: ``status``: a profile that should run is not RUNNING (0 when all of them are).
EXIT_NOT_ALL_RUNNING = 3
EXIT_DAEMON_UNREACHABLE = 4
#: ``--wait``: the awaited start failed / did not end in time.
EXIT_START_FAILED = 5
EXIT_WAIT_TIMEOUT = 6


def socket_path(arg: str | None, environ: dict[str, str] | None = None) -> Path:
    """--socket, else $VLLM_SUPERVISOR_SOCKET, else the default path."""
    env = os.environ if environ is None else environ
    return Path(arg or env.get(SOCKET_ENV) or DEFAULT_SOCKET)


def err(message: str) -> None:
    """One line on stderr, named after the program."""
    print(f"supervisorctl: {message}", file=sys.stderr)


def client(ns: argparse.Namespace) -> ControlClient:
    return ControlClient(socket_path(ns.socket), timeout=ns.timeout)


def call(ns: argparse.Namespace, cmd: str, **args: Any) -> dict[str, Any] | int:
    """The daemon's reply, or an exit code after printing why there is none."""
    try:
        return client(ns).call(cmd, **args)
    except ControlError as exc:
        err(str(exc))
        return EXIT_DAEMON_UNREACHABLE


def failed(reply: dict[str, Any]) -> int | None:
    """None when the daemon said ok, else EXIT_ERROR after printing its error."""
    if reply.get("ok"):
        return None
    err(str(reply.get("error") or "the daemon reported an unspecified error"))
    return EXIT_ERROR


def printable(text: str) -> str:
    """``text`` with what stdout's encoding cannot show replaced (a sparkline on a latin-1 terminal)."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return text.encode(encoding, "replace").decode(encoding)
    except LookupError:
        pass
    return text


def dump(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str, ensure_ascii=False))


def should_run(p: Mapping[str, Any]) -> bool:
    """Whether the operator wants this profile running (a profile stopped on purpose has intent stop)."""
    return bool(p.get("intent", "run") != "stop")


def status_exit_code(profiles: Sequence[Mapping[str, Any]]) -> int:
    """0 when every profile that should run is RUNNING (profiles stopped on purpose do not count) and
    looked at since the daemon started (a recorded RUNNING Docker has not confirmed yet is no proof);
    3 when one of them is not, or when there is no profile at all."""
    running = [p.get("state") == "RUNNING" and p.get("observed", True) for p in profiles if should_run(p)]
    if profiles and all(running):
        return EXIT_OK
    return EXIT_NOT_ALL_RUNNING

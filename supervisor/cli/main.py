"""``supervisorctl``: a thin client of the daemon's control socket, plus offline tools (no daemon needed).

Exit codes: see :mod:`supervisor.cli.common`. Offline commands import their modules lazily, so the CLI
starts fast and works even when one of them is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from supervisor import __version__
from supervisor.cli.common import (
    DEFAULT_CONFIG,
    DEFAULT_SOCKET,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    SOCKET_ENV,
    call,
    client,
    dump,
    err,
    failed,
    printable,
    status_exit_code,
)
from supervisor.cli.offline import (
    cmd_check_config,
    cmd_restore,
    cmd_snapshot,
    cmd_test_alert,
    cmd_unit_failed,
)
from supervisor.core.errors import SupervisorError
from supervisor.core.fleet.status_doc import only_profile, profiles_of

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from typing import Any

# ---- daemon commands -------------------------------------------------------------------------------


def cmd_status(ns: argparse.Namespace) -> int:
    reply = call(ns, "status", **({"name": ns.name} if ns.name else {}))
    if isinstance(reply, int):
        return reply
    if (code := failed(reply)) is not None:
        return code
    data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
    assert isinstance(data, dict)
    data = only_profile(data, ns.name or None)
    profiles = profiles_of(data)
    if ns.name and not profiles:
        err(f"no profile named {ns.name!r}")
        return EXIT_ERROR
    if ns.json:
        dump(data)
    else:
        from supervisor.cli.render import render_status

        print(render_status(data, time.time()))
    return status_exit_code(profiles)


def _action(cmd: str) -> Callable[[argparse.Namespace], int]:
    def run(ns: argparse.Namespace) -> int:
        args: dict[str, Any] = {"name": ns.name}
        if getattr(ns, "wait", False):
            from supervisor.cli.ops import run_and_wait

            return run_and_wait(ns, cmd, client(ns))
        reply = call(ns, cmd, **args)
        if isinstance(reply, int):
            return reply
        if (code := failed(reply)) is not None:
            return code
        data = reply.get("data")
        if isinstance(data, dict) and "message" in data:
            print(data["message"])
        elif isinstance(data, str) and data:
            print(data)
        else:
            print(f"{cmd} {ns.name}: ok")
        return EXIT_OK

    return run


def _records(data: Any, key: str) -> list[dict[str, Any]]:
    items = data.get(key) if isinstance(data, dict) else data
    return [r for r in items or [] if isinstance(r, dict)]


def _list_command(
    ns: argparse.Namespace, cmd: str, key: str, render: Callable[[list[dict[str, Any]]], str]
) -> int:
    """A read command returning records: table by default, JSON with --json."""
    reply = call(ns, cmd, name=ns.name, n=ns.n)
    if isinstance(reply, int):
        return reply
    if (code := failed(reply)) is not None:
        return code
    records = _records(reply.get("data"), key)
    if ns.json:
        dump(records)
    else:
        print(printable(render(records)))
    return EXIT_OK


def cmd_events(ns: argparse.Namespace) -> int:
    from supervisor.cli.render import render_events

    return _list_command(ns, "events", "events", render_events)


def cmd_history(ns: argparse.Namespace) -> int:
    from supervisor.cli.render import render_history

    return _list_command(ns, "history", "starts", render_history)


def cmd_logs(ns: argparse.Namespace) -> int:
    from supervisor.cli.ops import cmd_logs as run

    return run(ns, client(ns))


# ---- offline commands ------------------------------------------------------------------------------


def cmd_diagnose(ns: argparse.Namespace) -> int:
    from supervisor.offline.diagnose import run_diagnose

    if ns.stack:
        from supervisor.cli.ops import cmd_stack

        return cmd_stack(ns, ns.stack)
    log_lines: list[str] | None = None
    secrets: frozenset[str] = frozenset()
    if ns.previous is not None:
        from supervisor.cli.ops import archived_lines

        if not ns.container:
            err("--previous needs --container PROFILE (the archive of that profile's failed starts)")
            return EXIT_USAGE
        got = archived_lines(ns, client(ns))
        if isinstance(got, int):
            return got
        log_lines = got
    elif ns.container:
        from supervisor.offline.diagnose import container_input

        try:
            log_lines, secrets = container_input(ns.container)
        except SupervisorError as exc:
            err(f"cannot read the logs of container {ns.container}: {exc}")
            return EXIT_ERROR
    code, text = run_diagnose(
        Path(ns.log) if ns.log else None,
        Path(ns.kernel_log) if ns.kernel_log else None,
        ns.kernel,
        ns.json,
        log_lines=log_lines,
        secrets=secrets,
        gmu=ns.gmu,
    )
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return int(code)


def cmd_reload(ns: argparse.Namespace) -> int:
    reply = call(ns, "reload")
    if isinstance(reply, int):
        return reply
    if (code := failed(reply)) is not None:
        return code
    data = reply.get("data")
    print(data.get("message") if isinstance(data, dict) else "reloaded")
    return EXIT_OK


def cmd_diff(ns: argparse.Namespace) -> int:
    """Exit 0: the container matches its profile; 1: it differs (one line per difference), or an error."""
    reply = call(ns, "diff", name=ns.name)
    if isinstance(reply, int):
        return reply
    if (code := failed(reply)) is not None:
        return code
    data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
    assert isinstance(data, dict)
    lines = [str(x) for x in data.get("drift") or []]
    if ns.json:
        dump(data)
    elif lines:
        print(f"{ns.name}: the running container differs from its profile (values of secrets masked):")
        print("\n".join(f"  {line}" for line in lines))
    else:
        print(f"{ns.name}: the running container matches its profile")
    return EXIT_ERROR if lines else EXIT_OK


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it: $COLUMNS, else the terminal of
    standard output, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Help(argparse.HelpFormatter):
    """argparse's help formatter, told its width: left to itself it imports ``shutil`` (and with it bz2
    and lzma) for every parser it formats, about 3 ms of every client start (bench/bench_cli.py), although
    only ``--help`` prints anything."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
    ) -> None:
        super().__init__(
            prog, indent_increment, max_help_position, _columns() - 2 if width is None else width
        )


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that formats with :class:`_Help`; its subparsers are of this class too (argparse
    makes them of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every command (see docs/contract.md "Commands")."""
    parser = _Parser(
        prog="supervisorctl", description="Control and inspect the vLLM supervisor daemon (vllm-supervisor)."
    )
    parser.add_argument(
        "--socket", help=f"control socket (default: ${SOCKET_ENV}, else {DEFAULT_SOCKET})", default=None
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the daemon (default 10)"
    )
    parser.add_argument("--version", action="version", version=f"supervisorctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = add(
        "status",
        cmd_status,
        "state of every profile (exit 0 all that should run are RUNNING, 3 otherwise, 4 daemon unreachable)",
    )
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true")
    for name, text in (
        ("start", "start a profile (clears a manual stop)"),
        ("stop", "stop a profile; it stays stopped across daemon restarts and reboots until start"),
        ("restart", "graceful restart: drain, stop, drop caches, settle, start, verify"),
        ("reset", "re-arm an open circuit breaker"),
    ):
        p = add(name, _action(name), text)
        p.add_argument("name")
        if name in ("start", "restart"):
            from supervisor.cli.ops import add_wait_arguments

            add_wait_arguments(p)
    p = add("maintenance", _action("maintenance"), "run the maintenance sequence")
    p.add_argument("name")
    p.add_argument("--now", action="store_true", required=True, help="run it now (required)")
    add("reload", cmd_reload, "re-read the config: start added profiles, mark changed ones (never a bounce)")
    p = add(
        "diff", cmd_diff, "how a profile's running container differs from the profile (exit 1 if it does)"
    )
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p = add("events", cmd_events, "the persisted event history")
    p.add_argument("name", nargs="?")
    p.add_argument("-n", type=int, default=50, help="how many (default 50)")
    p.add_argument("--json", action="store_true")
    p = add(
        "history",
        cmd_history,
        "KV pool sparkline, then one row per start: outcome, KV pool, concurrency, load, memory, gmu, image",
    )
    p.add_argument("name")
    p.add_argument("-n", type=int, default=50, help="how many (default 50)")
    p.add_argument("--json", action="store_true")
    from supervisor.cli.ops import add_logs_parser

    add_logs_parser(sub, cmd_logs)
    p = add("check-config", cmd_check_config, "validate a daemon config or profile (offline)")
    p.add_argument("path")
    p = add("snapshot", cmd_snapshot, "export any running container to a restorable snapshot (offline)")
    p.add_argument("container")
    p.add_argument("--out", help="directory (default: the config's restore_dir, else ./restore)")
    p.add_argument("--config", help=f"daemon config whose restore_dir to use (default {DEFAULT_CONFIG})")
    p = add("restore", cmd_restore, "recreate a container from a snapshot and wait until healthy (offline)")
    p.add_argument("name")
    p.add_argument(
        "--from", dest="from_dir", help="directory (default: the config's restore_dir, else ./restore)"
    )
    p.add_argument(
        "--config",
        help=f"daemon config: restore_dir, host.*, its profiles (default {DEFAULT_CONFIG})",
    )
    p.add_argument("--replace", action="store_true", help="replace an existing container of that name")
    p.add_argument(
        "--wait",
        type=float,
        metavar="S",
        help="seconds to wait for the load (default: the profile's startup.deadline_s, else 1800)",
    )
    p = add(
        "diagnose", cmd_diagnose, "explain a vLLM start-up failure from its log and the kernel log (offline)"
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--log", help="a vLLM log file")
    src.add_argument("--container", help="read the log of this container")
    ker = p.add_mutually_exclusive_group()
    ker.add_argument("--kernel-log", help="a saved kernel log (dmesg) file")
    ker.add_argument("--kernel", action="store_true", help="read this host's kernel log")
    p.add_argument(
        "--gmu",
        type=float,
        default=None,
        help="the start's --gpu-memory-utilization: a memory failure then names the gmu that keeps the "
        "host reserve (from this host's MemTotal and MemAvailable now)",
    )
    p.add_argument(
        "--previous",
        type=int,
        nargs="?",
        const=1,
        default=None,
        metavar="K",
        help="with --container PROFILE: the archived log of its K-th last failed start (via the daemon)",
    )
    p.add_argument(
        "--stack",
        metavar="PROFILE",
        help="where the running engine is now: its engine core's Python stack (py-spy, via the daemon)",
    )
    p.add_argument("--json", action="store_true")
    p = add("test-alert", cmd_test_alert, "send a test message to every configured alert channel (offline)")
    p.add_argument(
        "--config",
        default=str(DEFAULT_CONFIG),
        help=f"daemon config whose alert channels to test (default {DEFAULT_CONFIG})",
    )
    p = add("unit-failed", cmd_unit_failed, "alert that the daemon's systemd unit failed for good (offline)")
    p.add_argument("unit", help="the failed unit (the OnFailure= unit passes %%i)")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="daemon config with the channels")
    from supervisor.cli.offline import add_init_parsers

    add_init_parsers(add)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``supervisorctl``."""
    ns = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = ns.func
    try:
        return func(ns)
    except KeyboardInterrupt:
        return 130
    except SupervisorError as exc:
        err(str(exc))
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())

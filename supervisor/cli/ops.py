"""``supervisorctl`` operator workflows: ``start|restart --wait``, ``logs``, ``diagnose --previous``.

Kept apart from :mod:`supervisor.cli.main` (the parser and the one-shot commands); imported lazily.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from supervisor.adapters.control.client import ControlClient
from supervisor.cli.common import EXIT_DAEMON_UNREACHABLE, EXIT_ERROR, EXIT_OK, call, err, failed
from supervisor.core.errors import ControlError
from supervisor.core.fleet.status_doc import profiles_of

TYPE_CHECKING = False  # not typing's: supervisorctl starts without it (tests/test_cli_imports.py)
if TYPE_CHECKING:
    from typing import Any

#: ``logs --follow`` asks the daemon for new lines this often.
FOLLOW_POLL_S = 1.0


def add_wait_arguments(p: argparse.ArgumentParser) -> None:
    """``--wait`` and its ``--wait-timeout`` on ``start`` / ``restart`` (``--timeout`` is the socket's)."""
    p.add_argument(
        "--wait",
        action="store_true",
        help="follow the start to RUNNING (progress on stderr); exit 0 RUNNING, 5 failed, 6 timeout",
    )
    p.add_argument(
        "--wait-timeout",
        dest="wait_timeout",
        type=float,
        default=None,
        metavar="S",
        help="with --wait: give up after S seconds "
        "(default: the profile's startup deadline + drain timeout + stop grace + 60 s)",
    )


def _profile_status(client: ControlClient, name: str) -> dict[str, Any] | str:
    reply = client.call("status", name=name)
    if not reply.get("ok"):
        return str(reply.get("error") or "status failed")
    data = reply.get("data")
    profiles = profiles_of(data, name) if isinstance(data, dict) else []
    return profiles[0] if profiles else f"no profile named {name!r}"


def run_and_wait(ns: argparse.Namespace, cmd: str, client: ControlClient) -> int:
    """Send ``start``/``restart`` and follow it (see :mod:`supervisor.cli.wait`)."""
    from supervisor.cli.wait import Follower, baseline_of, default_timeout

    try:
        before = _profile_status(client, ns.name)
        if isinstance(before, str):
            err(before)
            return EXIT_ERROR
        sent_at = time.time()
        reply = client.call(cmd, name=ns.name)
    except ControlError as exc:
        err(str(exc))
        return EXIT_DAEMON_UNREACHABLE
    if not reply.get("ok"):
        err(str(reply.get("error") or "the daemon reported an unspecified error"))
        return EXIT_ERROR
    message = (reply.get("data") or {}).get("message") if isinstance(reply.get("data"), dict) else None
    print(f"{cmd} {ns.name}: {message or 'ok'}", file=sys.stderr)
    timeout = ns.wait_timeout if ns.wait_timeout is not None else default_timeout(before)
    return Follower(client.call, ns.name).follow(cmd, baseline_of(before), timeout, sent_at)


# ---- logs --------------------------------------------------------------------------------------------


def add_logs_parser(sub: Any, func: Any) -> None:
    """The ``logs`` subcommand."""
    help_text = (
        "the current container's log, or (--previous K) the archived log of the K-th last failed start"
    )
    p = sub.add_parser("logs", help=help_text, description=help_text)
    p.set_defaults(func=func)
    p.add_argument("name")
    p.add_argument("-n", type=int, default=200, help="the last N lines (default 200, 0 = all)")
    p.add_argument(
        "--previous",
        type=int,
        nargs="?",
        const=1,
        default=None,
        metavar="K",
        help="the archived log of the K-th last failed start (default 1 = the last)",
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines (Ctrl-C ends)")


def _print_lines(lines: list[Any]) -> None:
    for line in lines:
        sys.stdout.write(f"{line}\n")
    sys.stdout.flush()


def cmd_logs(ns: argparse.Namespace, client: ControlClient) -> int:
    if ns.previous is not None and ns.follow:
        err("--follow reads the current container; an archived log does not grow")
        return 2
    args: dict[str, Any] = {"name": ns.name, "n": ns.n}
    if ns.previous is not None:
        args["previous"] = ns.previous
    try:
        reply = client.call("logs", **args)
    except ControlError as exc:
        err(str(exc))
        return EXIT_DAEMON_UNREACHABLE
    if not reply.get("ok"):
        err(str(reply.get("error") or "logs failed"))
        return EXIT_ERROR
    data = reply.get("data") or {}
    if data.get("source") == "archive":
        a = data.get("archive") or {}
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(a.get("at") or 0)))
        print(
            f"archived log {ns.previous}/{len(data.get('archives') or [])} of {ns.name}: "
            f"{a.get('outcome')} at {at}, container {str(a.get('container_id') or '?')[:12]}"
            + (f" ({a['dropped_bytes']} bytes cut from the start)" if a.get("dropped_bytes") else ""),
            file=sys.stderr,
        )
    elif data.get("container_id") is None and not ns.follow:
        err(f"{ns.name} has no container ({data.get('container')}); `--previous` shows failed starts")
        return EXIT_ERROR
    _print_lines(list(data.get("lines") or []))
    if not ns.follow:
        return EXIT_OK
    return _follow(client, ns.name, data.get("container_id"), data.get("cursor"))


def _follow(client: ControlClient, name: str, container_id: Any, cursor: Any) -> int:
    """Poll for lines after ``cursor`` until interrupted; a new container is announced on stderr."""
    quiet = False
    while True:
        time.sleep(FOLLOW_POLL_S)
        try:
            reply = client.call("logs", name=name, n=0, cursor=cursor)
        except ControlError as exc:
            if not quiet:
                err(f"{exc}; still trying")
            quiet = True
            continue
        quiet = False
        if not reply.get("ok"):
            err(str(reply.get("error")))
            continue
        data = reply.get("data") or {}
        cid = data.get("container_id")
        if cid != container_id and cid is not None:
            print(f"--- {name}: container {str(cid)[:12]} ---", file=sys.stderr, flush=True)
            container_id = cid
        _print_lines(list(data.get("lines") or []))
        cursor = data.get("cursor") or cursor


def archived_lines(ns: argparse.Namespace, client: ControlClient) -> list[str] | int:
    """``diagnose --container NAME --previous K``: the archived log's lines, through the daemon."""
    try:
        reply = client.call("logs", name=ns.container, n=0, previous=ns.previous)
    except ControlError as exc:
        err(str(exc))
        return EXIT_DAEMON_UNREACHABLE
    if not reply.get("ok"):
        err(str(reply.get("error") or "logs failed"))
        return EXIT_ERROR
    return [str(line) for line in (reply.get("data") or {}).get("lines") or []]


def cmd_stack(ns: argparse.Namespace, name: str) -> int:
    """``diagnose --stack PROFILE``: the engine core's top frames now (samples of py-spy, by the daemon)."""
    reply = call(ns, "stack", name=name)
    if isinstance(reply, int):
        return reply
    bad = failed(reply)
    if bad is not None:
        return bad
    data = reply.get("data") or {}
    if ns.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    frames = data.get("frames") or []
    if not frames:
        err(f"{name}: no stack ({data.get('error') or 'not read'})")
        return EXIT_ERROR
    print(
        f"{name}: engine core pid {data.get('pid')},"
        f" same top frame in {data.get('same')} of {data.get('samples')} samples"
    )
    for f in frames:
        print(f"  {f.get('function')} ({f.get('file')}:{f.get('line')})")
    return EXIT_OK

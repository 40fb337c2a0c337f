"""The control API: what ``supervisorctl`` may ask the daemon, answered on the control server's threads.

Reads (status, events, history, logs) never wait for the loop: status is the last published
document, events and history come from the store, logs from Docker or the archive
(:mod:`supervisor.daemon.executor.logread`). Commands become operator events on the inbox; the reply is
whatever the machine answered, within ``COMMAND_TIMEOUT_S``. A ``reset`` carries who asked: the caller's
uid (SO_PEERCRED, read by the control server) and its user name. Every reply passes ``redact`` (the
daemon's secret book): status, events, history, logs and diff never carry a secret value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from supervisor.adapters.host.users import user_name
from supervisor.adapters.store.state import Store
from supervisor.core import events as E
from supervisor.core.errors import SupervisorError
from supervisor.core.fleet.status_doc import only_profile
from supervisor.core.sentinel.ledger import PERF_ROWS, with_decode
from supervisor.core.spec.secrets import Redactor
from supervisor.core.vocab import DAEMON_PROFILE
from supervisor.daemon.executor.logread import LogReader
from supervisor.daemon.inbox import Inbox, ReloadRequest, ReplyBox

#: How long an operator command waits for the loop to answer.
COMMAND_TIMEOUT_S = 10.0
COMMANDS: dict[str, Callable[[], E.Event]] = {
    "start": E.StartRequested,
    "stop": E.StopRequested,
    "restart": E.RestartRequested,
    "reset": E.ResetRequested,
    "maintenance": E.MaintenanceRequested,
}


#: ``diff NAME``: one masked line per difference between the container and its profile (empty: none).
DiffFn = Callable[[str], list[str]]
#: Reads a profile's engine-core stack now (``supervisorctl diagnose --stack``; py-spy, bounded).
StackFn = Callable[[str], dict[str, object]]


#: ``events -n`` / ``history -n``: more than this is refused (the answer must fit the socket's limits).
MAX_RECORDS = 10_000


def record_count(raw: object, default: int = 50) -> int | None:
    """The ``n`` of a read request: absent -> default; a whole number 1..MAX_RECORDS; else None."""
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        return None
    try:
        n = int(raw)
    except ValueError:
        return None
    return n if 1 <= n <= MAX_RECORDS else None


class ControlApi:
    """Answers control requests ``{"cmd", "args"}`` with ``{"ok", "data" | "error"}``.

    ``names`` gives the current profile names (a reload changes them); ``diff`` compares a profile's
    container with the profile (it asks Docker: it runs on the control thread, never on the loop).
    """

    def __init__(
        self,
        names: Callable[[], Sequence[str]],
        status: Callable[[], dict[str, Any]],
        store: Store,
        inbox: Inbox,
        logs: LogReader | None = None,
        diff: DiffFn | None = None,
        stack: StackFn | None = None,
        redact: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self._names = names
        self._status = status
        self._store = store
        self._inbox = inbox
        self._logs = logs
        self._diff = diff
        self._stack = stack
        self._redact = redact or Redactor().data

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request (runs on a control server thread), every string of the reply masked."""
        return self._redact(self._handle(request))

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = str(request.get("cmd") or "")
        args = request.get("args") or {}
        name = args.get("name")
        names = list(self._names())
        daemon_wide = cmd == "events" and name == DAEMON_PROFILE  # the daemon's own events
        if name is not None and name not in names and not daemon_wide:
            known = ", ".join(sorted(names)) or "none"
            return {"ok": False, "error": f"no profile named {name!r} (known: {known})"}
        if cmd == "status":
            status = self._status()
            if name is not None:
                status = only_profile(status, name)
            return {"ok": True, "data": status}
        if cmd in ("events", "history"):
            n = record_count(args.get("n"))
            if n is None:
                return {"ok": False, "error": f"n must be a whole number from 1 to {MAX_RECORDS}"}
            if cmd == "events":
                return {"ok": True, "data": {"events": self._store.read_events(name, n)}}
            starts = with_decode(self._store.read_starts(name, n), self._store.read_perf(name, PERF_ROWS))
            return {"ok": True, "data": {"starts": starts}}
        if cmd == "logs" and self._logs is not None:
            if name is None:
                return {"ok": False, "error": "logs needs a profile name"}
            return self._logs.handle(name, args)
        if cmd == "reload":
            return self._answer(cmd, self._inbox.command_daemon(ReloadRequest()))
        if cmd == "diff" and self._diff is not None:
            if name is None:
                return {"ok": False, "error": "diff needs a profile name"}
            try:
                return {"ok": True, "data": {"name": name, "drift": self._diff(name)}}
            except (SupervisorError, KeyError) as exc:  # KeyError: a reload removed it meanwhile
                return {"ok": False, "error": f"diff {name}: {exc}"}
        if cmd == "stack" and self._stack is not None:
            if name is None:
                return {"ok": False, "error": "stack needs a profile name"}
            try:
                return {"ok": True, "data": {"name": name, **self._stack(name)}}
            except (SupervisorError, KeyError) as exc:
                return {"ok": False, "error": f"stack {name}: {exc}"}
        factory = COMMANDS.get(cmd)
        if factory is None:
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        if name is None:
            return {"ok": False, "error": f"{cmd} needs a profile name"}
        event = _reset(request.get("peer")) if cmd == "reset" else factory()
        return self._answer(cmd, self._inbox.command(name, event))

    @staticmethod
    def _answer(cmd: str, box: ReplyBox) -> dict[str, Any]:
        """The loop's answer in ``box``, or a timeout error."""
        if not box.done.wait(COMMAND_TIMEOUT_S):
            return {"ok": False, "error": f"the daemon did not answer {cmd} within {COMMAND_TIMEOUT_S:.0f} s"}
        if box.ok:
            return {"ok": True, "data": {"message": box.message}}
        return {"ok": False, "error": box.message}


def _reset(peer: object) -> E.ResetRequested:
    """``reset`` naming its caller: the peer's uid (from the socket, not from the request) and user name."""
    uid = peer.get("uid") if isinstance(peer, dict) else None
    if not isinstance(uid, int) or isinstance(uid, bool) or uid < 0:
        return E.ResetRequested()
    return E.ResetRequested(uid=uid, user=user_name(uid))

"""``supervisorctl logs``: the daemon reads a profile's log for its operators (on a control thread).

Through the daemon, not straight from Docker: operators need the socket group, not the docker group,
and the archived logs of failed starts live in the private state dir. ``--follow`` is the CLI polling
with a cursor: each reply carries the Docker time stamp of its last line (``"sec.nanos"``) and the
next request asks only for lines after it (Docker's ``since`` is inclusive, so lines at or before the
cursor are dropped here).

Request args: ``name``, ``n`` (last N lines, 0 = all, capped at ``MAX_LINES``), ``previous`` (K >= 1:
the K-th newest archive instead of the current container), ``cursor`` (follow).
Reply data: ``source`` ("container" | "archive"), ``container``, ``container_id``, ``lines``,
``cursor`` (container), ``archive`` + ``archives`` (archive; each ``{file, container_id, at,
outcome, dropped_bytes}``).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.store.log_archive import LogArchive
from supervisor.core.errors import StateError, SupervisorError

MAX_LINES = 50_000
DEFAULT_LINES = 200
_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z ?(.*)$", re.DOTALL)

Cursor = tuple[int, int]


def parse_stamped(line: str) -> tuple[Cursor | None, str]:
    """``2024-06-01T12:00:00.123456789Z text`` -> ((epoch s, ns), text); (None, line) without a stamp."""
    from datetime import UTC, datetime

    m = _TS_RE.match(line)
    if m is None:
        return None, line
    sec = int(datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC).timestamp())
    nanos = int((m.group(2) or "0").ljust(9, "0"))
    return (sec, nanos), m.group(3)


def cursor_text(cursor: Cursor) -> str:
    """The cursor as Docker's ``since`` accepts it."""
    return f"{cursor[0]}.{cursor[1]:09d}"


def parse_cursor(text: object) -> Cursor | None:
    """Inverse of :func:`cursor_text` (None when absent or malformed)."""
    if not isinstance(text, str) or not re.fullmatch(r"\d+\.\d{9}", text):
        return None
    sec, nanos = text.split(".")
    return int(sec), int(nanos)


def after_cursor(stamped: Iterable[str], cursor: Cursor | None) -> tuple[list[str], Cursor | None]:
    """Lines strictly after ``cursor`` (unstamped pieces take their line's stamp) and the new cursor."""
    out: list[str] = []
    last = cursor
    stamp: Cursor | None = None
    for raw in stamped:
        found, text = parse_stamped(raw)
        stamp = found or stamp
        if cursor is not None and (stamp is None or stamp <= cursor):
            continue
        out.append(text)
        if stamp is not None and (last is None or stamp > last):
            last = stamp
    return out, last


class LogReader:
    """Answers ``logs`` requests for the profiles ``containers`` maps to their container names."""

    def __init__(self, docker: DockerAdapter, archive: LogArchive, containers: Mapping[str, str]) -> None:
        self._docker = docker
        self._archive = archive
        self._containers = dict(containers)

    def handle(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """One ``logs`` request of profile ``name``: ``{"ok", "data" | "error"}``."""
        n = args.get("n")
        limit = MAX_LINES if n == 0 else min(n if isinstance(n, int) and n > 0 else DEFAULT_LINES, MAX_LINES)
        previous = args.get("previous")
        if previous is not None:
            if not isinstance(previous, int) or previous < 1:
                return {"ok": False, "error": "previous must be a whole number >= 1"}
            return self._previous(name, previous, limit)
        return self._current(name, limit, parse_cursor(args.get("cursor")))

    def _previous(self, name: str, k: int, limit: int) -> dict[str, Any]:
        try:
            found = self._archive.read(name, k)
        except StateError as exc:
            return {"ok": False, "error": str(exc)}
        entries = [e.to_dict() for e in self._archive.entries(name)]
        if found is None:
            have = f"only {len(entries)}" if entries else "none"
            return {"ok": False, "error": f"no archived log #{k} of {name} ({have}: failed starts only)"}
        meta, lines = found
        return {
            "ok": True,
            "data": {
                "source": "archive",
                "container": self._containers[name],
                "container_id": meta.container_id,
                "archive": meta.to_dict(),
                "archives": entries,
                "lines": lines[-limit:],
            },
        }

    def _current(self, name: str, limit: int, cursor: Cursor | None) -> dict[str, Any]:
        container = self._containers[name]
        data: dict[str, Any] = {"source": "container", "container": container, "container_id": None}
        try:
            status = self._docker.status(container)
            if status is None:
                return {"ok": True, "data": {**data, "lines": [], "cursor": None}}
            since = None if cursor is None else max(1.0, cursor[0] + cursor[1] / 1e9 - 1e-6)
            stamped = self._docker.logs(
                status.id, since=since, tail=None if cursor else limit, timestamps=True
            )
            lines, last = after_cursor(deque(stamped, maxlen=MAX_LINES), cursor)
        except SupervisorError as exc:
            return {"ok": False, "error": f"cannot read the log of {container}: {exc}"}
        return {
            "ok": True,
            "data": {
                **data,
                "container_id": status.id,
                "lines": lines[-limit:],
                "cursor": cursor_text(last) if last is not None else None,
            },
        }

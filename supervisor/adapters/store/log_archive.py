"""Archived logs of failed starts: ``<state_dir>/logs/<profile>/<ms>-<container12>.log``.

The next start removes a failed container (and its log) before it creates a new one, so the log is
copied here when the failure is recorded. Bounded per profile: the newest ``keep`` archives, each at
most ``max_bytes`` (the END of the log is kept: that is where the failure is). vLLM prints its
arguments, which may include secrets: the directories are 0700 and the files 0600 from creation.

Each file starts with one header line ``#vllm-supervisor-archive {json}`` (container id, time, start
outcome, bytes dropped), then the log lines as the container printed them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.adapters.store.files import capped_lines, write_atomic
from supervisor.core.errors import StateError
from supervisor.core.log_events import LINE_MAX

HEADER = "#vllm-supervisor-archive "
#: Defaults: the last 5 failed starts of a profile, 2 MiB each.
DEFAULT_KEEP = 5
DEFAULT_MAX_BYTES = 2 * 1024 * 1024
_NAME_RE = re.compile(r"^(\d{13})-([0-9a-f]{1,12}|none)\.log$")


@dataclass(frozen=True)
class ArchivedLog:
    """One archived log (``k`` = 1 is the newest)."""

    path: Path
    profile: str
    container_id: str | None
    at: float
    outcome: str
    dropped_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """For the control API (no path: the state dir is private)."""
        return {
            "file": self.path.name,
            "container_id": self.container_id,
            "at": self.at,
            "outcome": self.outcome,
            "dropped_bytes": self.dropped_bytes,
        }


class LogArchive:
    """Writes, lists and reads the archived logs of each profile."""

    def __init__(self, root: Path, keep: int = DEFAULT_KEEP, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.keep = max(1, keep)
        self.max_bytes = max(1024, max_bytes)

    def _dir(self, profile: str) -> Path:
        d = self.root / profile
        for path in (self.root, d):
            path.mkdir(mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)  # also when it existed with looser bits
        return d

    def save(
        self, profile: str, container_id: str | None, outcome: str, at: float, lines: Iterable[str]
    ) -> ArchivedLog:
        """Archive ``lines`` (the end of them, within ``max_bytes``); prune to ``keep``. StateError on I/O."""
        kept: deque[str] = deque()
        size = dropped = 0
        for line in lines:
            text = line.rstrip("\n") + "\n"
            kept.append(text)
            size += len(text.encode("utf-8", "replace"))
            while size > self.max_bytes and kept:
                gone = len(kept.popleft().encode("utf-8", "replace"))
                size -= gone
                dropped += gone
        short = (container_id or "none")[:12]
        header = {"container_id": container_id, "at": at, "outcome": outcome, "dropped_bytes": dropped}
        text = HEADER + json.dumps(header) + "\n" + "".join(kept)
        try:
            d = self._dir(profile)
            path = d / f"{int(at * 1000):013d}-{short}.log"
            write_atomic(path, text.encode("utf-8", "replace"))
            self._prune(d)
        except OSError as exc:
            raise StateError(f"cannot archive the log of {profile}: {exc.strerror or exc}") from exc
        return ArchivedLog(path, profile, container_id, at, outcome, dropped)

    def _prune(self, d: Path) -> None:
        files = sorted(p for p in d.iterdir() if _NAME_RE.match(p.name))
        for old in files[: -self.keep]:
            with contextlib.suppress(FileNotFoundError):
                old.unlink()

    def entries(self, profile: str) -> list[ArchivedLog]:
        """The archives of ``profile``, newest first."""
        d = self.root / profile
        try:
            files = sorted((p for p in d.iterdir() if _NAME_RE.match(p.name)), reverse=True)
        except OSError:
            return []
        out = []
        for path in files:
            meta = self._header(path)
            if meta is not None:
                out.append(meta)
        return out

    def _header(self, path: Path) -> ArchivedLog | None:
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                first = f.readline(LINE_MAX)
            data = json.loads(first.removeprefix(HEADER)) if first.startswith(HEADER) else {}
        except (OSError, json.JSONDecodeError):
            return None
        m = _NAME_RE.match(path.name)
        at = data.get("at")
        cid = data.get("container_id")
        return ArchivedLog(
            path,
            path.parent.name,
            cid if isinstance(cid, str) else None,
            float(at) if isinstance(at, int | float) else int(m.group(1)) / 1000 if m else 0.0,
            str(data.get("outcome") or "?"),
            int(data.get("dropped_bytes") or 0),
        )

    def read(self, profile: str, k: int) -> tuple[ArchivedLog, list[str]] | None:
        """The ``k``-th newest archive (1 = the last failed start) and its lines; None if there is none."""
        entries = self.entries(profile)
        if k < 1 or k > len(entries):
            return None
        meta = entries[k - 1]
        try:
            with meta.path.open(encoding="utf-8", errors="replace") as f:
                lines = list(capped_lines(f))
        except OSError as exc:
            raise StateError(f"cannot read {meta.path.name}: {exc.strerror or exc}") from exc
        return meta, lines[1:] if lines and lines[0].startswith(HEADER) else lines

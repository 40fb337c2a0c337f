"""What the vLLM log stream tells the machine: the log analyzer's signals as events, posted by the watcher;
and :class:`RootCause`, the root-cause line of a failed start a profile's state keeps (not an event)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogProgress:
    """Loading made progress (shard percentage and/or a new phase)."""

    pct: float | None
    phase: str


@dataclass(frozen=True)
class LogReady:
    """``Application startup complete.`` was printed."""


@dataclass(frozen=True)
class LogKvPool:
    """The KV cache pool line(s) were printed (with the GiB figures the log gave before them)."""

    tokens: int | None
    max_concurrency: float | None
    kv_gib: float | None = None  # "Available KV cache memory: X GiB"
    model_gib: float | None = None  # "Model loading took X GiB"
    usage: tuple[tuple[str, float], ...] = ()  # the "Actual usage" breakdown (core/vllm/memory.py)


@dataclass(frozen=True)
class LogStartupFailure:
    """The log proves the start failed (outcome is a diagnose outcome such as ``failed_oom``)."""

    outcome: str
    detail: str


@dataclass(frozen=True)
class LogEngineDead:
    """The log proves the engine core died after ready."""

    detail: str


@dataclass(frozen=True)
class LogMarker:
    """An expected (``forbidden=False``) or forbidden (``forbidden=True``) log marker appeared."""

    name: str
    forbidden: bool


@dataclass(frozen=True)
class AdoptedMarkers:
    """The markers of an adopted container's start-up log (read back from its StartedAt, bounded).

    ``missing`` are the expected markers the log does not prove, as ``pattern seen/count`` texts, only
    judged when ``complete`` (the log has vLLM's ready line: the start-up is over); ``forbidden`` the
    forbidden patterns it matched.
    """

    container_id: str
    missing: tuple[str, ...]
    forbidden: tuple[str, ...]
    complete: bool
    lines: int


#: The longest line any parser or masker sees (characters): Docker splits container log lines at 16 KiB
#: too. The masker and the log and kernel analyzers are regexes: every line is cut to this first, so
#: none of them ever sees more, whatever a file, a stream or a peer sends.
LINE_MAX = 16 * 1024


def cap_line(line: str, limit: int = LINE_MAX, dropped: int = 0) -> str:
    """``line`` cut to ``limit`` characters, saying how many were cut (``dropped``: characters of it already
    dropped while it was read, counted in)."""
    more = dropped + max(0, len(line) - limit)
    return line if not more else f"{line[:limit]} [... line cut: {more} more characters]"


@dataclass(frozen=True)
class RootCause:
    """A failed start's root-cause line, where the traceback says it came from, and its config
    (compared by core/vllm/root_cause.py)."""

    line: str
    where: str | None  # "path:line in func" of the traceback's last frame (None: not shown)
    fingerprint: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "where": self.where, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: object) -> RootCause | None:
        """Inverse of :meth:`to_dict`; None for anything else (an older state file)."""
        if not isinstance(data, dict) or not isinstance(data.get("line"), str):
            return None
        where, fp = data.get("where"), data.get("fingerprint")
        return cls(
            data["line"], where if isinstance(where, str) else None, fp if isinstance(fp, str) else None
        )

"""How many kernel lines that name another's process reach the history: a quota per kind and window. Pure.

A local user whose processes are OOM-killed in a loop (or who loops ``Killed process`` lines through any
path into the kernel log) must not fill the daemon's history, its ring of recent kernel lines (which a
failed start's diagnosis reads) or its loop with lines that are nobody's business but theirs: the first
``per_window`` lines of a kind in a window go through; the rest are counted and reported once when the
window ends (``kernel.held_back``). Lines that may be ours or nobody's are never held (they are judged).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: Lines of one kind naming another's process recorded per window; the rest are counted.
PER_WINDOW = 30
WINDOW_S = 60.0


@dataclass(frozen=True)
class KernelQuota:
    """Per kind: when its window started, how many lines went through and how many were held back."""

    per_window: int = PER_WINDOW
    window_s: float = WINDOW_S
    windows: tuple[tuple[str, float, int, int], ...] = ()  # (kind, started, admitted, held)

    def admit(self, kind: str, now: float) -> tuple[KernelQuota, bool]:
        """Whether one more line of ``kind`` goes through at ``now`` (a new window opens when the last
        one ended; call :meth:`due` first to report what it held)."""
        rows = {k: (t, a, h) for k, t, a, h in self.windows}
        started, admitted, held = rows.get(kind, (now, 0, 0))
        if now - started >= self.window_s:
            started, admitted, held = now, 0, 0
        ok = admitted < self.per_window
        rows[kind] = (started, admitted + 1, held) if ok else (started, admitted, held + 1)
        return replace(self, windows=tuple((k, *v) for k, v in rows.items())), ok

    def due(self, now: float) -> tuple[KernelQuota, list[tuple[str, int, float]]]:
        """Windows that ended by ``now``: ``(kind, lines held back, window start)`` for those that held any;
        they are closed."""
        keep: list[tuple[str, float, int, int]] = []
        out: list[tuple[str, int, float]] = []
        for kind, started, admitted, held in self.windows:
            if now - started >= self.window_s:
                if held:
                    out.append((kind, held, started))
                continue
            keep.append((kind, started, admitted, held))
        if len(keep) == len(self.windows):
            return self, out
        return replace(self, windows=tuple(keep)), out

"""Circuit breaker as a value: failures in a rolling window; once tripped it stays open until reset.

The bash suite miscounted across windows (it reset a counter at fixed window boundaries). Here every
failure keeps its own timestamp and ``count(now)`` looks at ``[now - window_s, now]`` exactly.
A failure stamped later than ``now`` (the wall clock stepped backwards) counts as happening now.
The breaker latches: ``tripped_at`` is set when the count reaches ``limit`` and only ``reset()`` clears
it, so an open breaker survives daemon restarts even after the window has slid past the failures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from supervisor.core.errors import StateError


@dataclass(frozen=True)
class Breaker:
    """Rolling-window failure counter that opens at ``limit`` failures within ``window_s`` seconds."""

    limit: int = 3
    window_s: float = 7200.0
    failures: tuple[float, ...] = ()
    tripped_at: float | None = None

    def count(self, now: float) -> int:
        """Failures within ``[now - window_s, now]`` (future stamps count as now)."""
        return sum(1 for t in self.failures if t >= now - self.window_s)

    def record(self, now: float) -> Breaker:
        """Record one failure at ``now``; drop failures older than the window; trip at the limit."""
        kept = (*(t for t in self.failures if t >= now - self.window_s), now)
        tripped = self.tripped_at
        if tripped is None and len(kept) >= self.limit:
            tripped = now
        return replace(self, failures=kept, tripped_at=tripped)

    def trip(self, now: float) -> Breaker:
        """Record one failure at ``now`` and open at once (a failure retrying cannot mend)."""
        return self.record(now).latch(now)

    def latch(self, now: float) -> Breaker:
        """Open now without recording another failure (the failure is recorded already)."""
        return self if self.tripped_at is not None else replace(self, tripped_at=now)

    def is_open(self, now: float) -> bool:
        """True once tripped (latched) or when the window holds ``limit`` failures."""
        return self.tripped_at is not None or self.count(now) >= self.limit

    def reset(self) -> Breaker:
        """Close the breaker and forget every failure."""
        return replace(self, failures=(), tripped_at=None)

    def configured(self, limit: int, window_s: float) -> Breaker:
        """The same history under (possibly changed) policy values."""
        if limit == self.limit and window_s == self.window_s:
            return self
        return replace(self, limit=limit, window_s=window_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for persistence."""
        return {
            "limit": self.limit,
            "window_s": self.window_s,
            "failures": list(self.failures),
            "tripped_at": self.tripped_at,
        }

    @classmethod
    def from_dict(cls, data: object) -> Breaker:
        """Inverse of :meth:`to_dict`; missing keys take defaults, wrong types raise StateError."""
        if not isinstance(data, dict):
            raise StateError(f"breaker: expected an object, got {type(data).__name__}")
        limit = data.get("limit", 3)
        window = data.get("window_s", 7200.0)
        failures = data.get("failures", [])
        tripped = data.get("tripped_at")
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise StateError("breaker.limit: expected an integer")
        if not _is_number(window):
            raise StateError("breaker.window_s: expected a number")
        if not isinstance(failures, list) or not all(_is_number(t) for t in failures):
            raise StateError("breaker.failures: expected a list of numbers")
        if tripped is not None and not _is_number(tripped):
            raise StateError("breaker.tripped_at: expected a number or null")
        return cls(
            limit=limit,
            window_s=float(window),
            failures=tuple(float(t) for t in failures),
            tripped_at=None if tripped is None else float(tripped),
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

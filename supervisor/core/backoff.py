"""Start backoff as a value: capped exponential delay, ``retry_at`` in wall epoch seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from supervisor.core.errors import StateError


@dataclass(frozen=True)
class Backoff:
    """``attempt`` failed starts in a row; the next start is allowed at ``retry_at`` (None: now)."""

    attempt: int = 0
    retry_at: float | None = None

    @staticmethod
    def delay_for(attempt: int, initial: float, factor: float, max_s: float) -> float:
        """Delay before retry number ``attempt`` (1-based): initial * factor**(attempt-1), capped."""
        exponent = max(attempt - 1, 0)
        delay = float(initial)
        for _ in range(exponent):  # bounded: stop multiplying once the cap is reached
            delay *= factor
            if delay >= max_s:
                return float(max_s)
        return min(delay, float(max_s))

    def next(self, now: float, initial: float, factor: float, max_s: float) -> Backoff:
        """One more failure at ``now``: bump the attempt and schedule the retry."""
        attempt = self.attempt + 1
        return Backoff(attempt=attempt, retry_at=now + self.delay_for(attempt, initial, factor, max_s))

    def reset(self) -> Backoff:
        """Forget the failure streak."""
        return Backoff()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form for persistence."""
        return {"attempt": self.attempt, "retry_at": self.retry_at}

    @classmethod
    def from_dict(cls, data: object) -> Backoff:
        """Inverse of :meth:`to_dict`; missing keys take defaults, wrong types raise StateError."""
        if not isinstance(data, dict):
            raise StateError(f"backoff: expected an object, got {type(data).__name__}")
        attempt = data.get("attempt", 0)
        retry_at = data.get("retry_at")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
            raise StateError("backoff.attempt: expected a non-negative integer")
        if retry_at is not None and (not isinstance(retry_at, int | float) or isinstance(retry_at, bool)):
            raise StateError("backoff.retry_at: expected a number or null")
        return cls(attempt=attempt, retry_at=None if retry_at is None else float(retry_at))

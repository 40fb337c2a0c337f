"""Companion checks, pure: when each companion is due and when its health flips (worth an alert).

A companion is a service next to the model server (an API gateway, say) the daemon checks but does not
own: a failure is shown and alerted, never acted on. The first check that fails alerts; a first check
that passes does not (nothing was wrong before); after that, every change of ok/failing alerts once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Flip = Literal["bad", "back"]


@dataclass(frozen=True)
class CompanionHealth:
    """What is known of one companion: the last check, since when it is in its current health."""

    name: str
    ok: bool | None = None  # None: not checked yet
    status: int | None = None  # the HTTP status of the last answer (None: no answer)
    error: str | None = None
    at: float | None = None  # wall time of the last check
    since: float | None = None  # wall time ``ok`` took its current value
    next_at: float = 0.0  # wall time the next check is due

    def due(self, now: float) -> bool:
        """Whether a check should be started now."""
        return now >= self.next_at

    def scheduled(self, now: float, interval_s: float) -> CompanionHealth:
        """A check was started at ``now``: the next one is due an interval later (even if this one hangs)."""
        return replace(self, next_at=now + interval_s)

    def observe(
        self, ok: bool, status: int | None, error: str | None, now: float
    ) -> tuple[CompanionHealth, Flip | None]:
        """The health after one check, and the flip it makes (None: no change worth an alert)."""
        flip: Flip | None = None
        if ok != self.ok:
            flip = "bad" if not ok else ("back" if self.ok is False else None)
        since = now if ok != self.ok else self.since
        return replace(self, ok=ok, status=status, error=None if ok else error, at=now, since=since), flip

    def to_dict(self) -> dict[str, object]:
        """For the status document (``companions: [{name, ok, status, at, ...}]``)."""
        return {
            "name": self.name,
            "ok": self.ok,
            "status": self.status,
            "at": self.at,
            "since": self.since,
            "error": self.error,
        }

"""Whether the dead-man heartbeat may say "all is well", pure (docs/alerts.md "Heartbeat").

The heartbeat pings the failure URL (healthchecks.io's ``/fail``) when

* any profile is FATAL (circuit breaker open), or
* any profile whose intent is *run* has not been serving (RUNNING or DEGRADED: a DEGRADED server still
  answers) for ``fail_after_s`` — not yet looked at (Docker silent), starting, in backoff, draining...

A profile stopped on purpose (intent *stop*) is fine. "Not serving since" is remembered across state
flips (a start that fails and retries every minute never serves): :class:`ServingWatch` keeps, per
profile, when it was first seen wanting to run without serving; the loop tells it every tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from supervisor.core.clock import format_duration
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import SERVING_STATES, State
from supervisor.core.vocab import Intent

#: Default ``heartbeat.fail_after_s``: the default ``startup.deadline_s``, so a slow but normal load
#: (5-20 min on a big model) never turns the heartbeat red.
DEFAULT_FAIL_AFTER_S = 1800.0


@dataclass(frozen=True)
class HeartbeatVerdict:
    """The ping's verdict: ``failing`` and why (one reason per profile at fault)."""

    failing: bool
    reasons: tuple[str, ...] = ()

    def body(self, header: str, status_line: str) -> str:
        """The ping's text: the header, OK or FAIL with the reasons, every profile's state."""
        verdict = "FAIL: " + "; ".join(self.reasons) if self.failing else "OK"
        return f"{header}: {verdict}\n{status_line}"


def _wants_serving(s: ProfileState) -> bool:
    return s.intent == Intent.RUN and (s.booting or s.state not in SERVING_STATES)


@dataclass(frozen=True)
class ServingWatch:
    """Per profile: since when it wants to run and does not serve (absent: serving or stopped on purpose)."""

    fail_after_s: float = DEFAULT_FAIL_AFTER_S
    down_since: tuple[tuple[str, float], ...] = ()

    def since(self, name: str) -> float | None:
        """When ``name`` was first seen wanting to run without serving (None: it serves or is stopped)."""
        return next((t for n, t in self.down_since if n == name), None)

    def observe(self, states: Mapping[str, ProfileState], now: float) -> ServingWatch:
        """The watch after looking at every profile at ``now`` (profiles gone from ``states`` are dropped)."""
        kept = []
        for name, s in states.items():
            if _wants_serving(s):
                first = self.since(name)
                kept.append((name, first if first is not None and first <= now else now))
        new = tuple(kept)
        return self if new == self.down_since else replace(self, down_since=new)

    def verdict(self, states: Mapping[str, ProfileState], now: float) -> HeartbeatVerdict:
        """FAIL when a profile is FATAL or has wanted to run without serving for ``fail_after_s``."""
        reasons = []
        for name, s in states.items():
            if s.state == State.FATAL:
                b = s.breaker
                fatal_for = format_duration(now - s.since)
                reasons.append(
                    f"{name} FATAL for {fatal_for} (circuit breaker open, {b.count(now)}/{b.limit})"
                )
                continue
            first = self.since(name)
            if first is not None and _wants_serving(s) and now - first >= self.fail_after_s:
                what = "not looked at yet" if s.booting else s.state.value
                reasons.append(
                    f"{name} not serving for {format_duration(now - first)} ({what}, wants to run)"
                )
        return HeartbeatVerdict(bool(reasons), tuple(reasons))

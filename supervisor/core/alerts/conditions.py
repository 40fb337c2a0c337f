"""Raised and resolved conditions, pure: one resolved message per raised one (flip-based).

Some alerts *raise* a condition (the breaker opened, Docker stopped answering) and others *resolve* it
(the breaker was reset, Docker answers again), like a monitoring service's firing/resolved pairs. The
tracker is an immutable value: ``(profile, condition) -> what raised it (kind, title, at)``.
:meth:`Conditions.decide` says whether an alert goes to the chat and returns the tracker that remembers
it: a raising alert marks its condition raised (a repeat while raised goes on to the sender's dedupe, as
any alert); a resolving alert is sent only when one of its conditions is raised, which it then clears,
so exactly one resolved message follows each raised one; a resolving alert for a condition never raised
is not sent (history: ``alert.resolve_unraised``). See docs/alerts.md "Raised and resolved".

A condition key may carry an instance: ``companion:<name>`` (from the alert's ``name`` param).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from supervisor.core.actions import Alert
from supervisor.core.clock import format_duration

#: The profile name daemon-wide alerts (Docker, alert delivery, the daemon itself) carry in the message;
#: they are tracked and recorded under profile "" like every daemon-wide history event.
DAEMON_PROFILE = "supervisor"
#: History events of :meth:`Conditions.decide`'s verdicts.
EVENT_RAISED = "alert.raised"
EVENT_RESOLVED = "alert.resolved"
EVENT_RESOLVE_UNRAISED = "alert.resolve_unraised"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Condition:
    """One condition: the alert kinds that raise it, those that resolve it, and how its duration reads."""

    name: str
    raised_by: tuple[str, ...]
    resolved_by: tuple[str, ...]
    lasted: str  # "open for" -> "open for: 2 h 13 min" in the resolved message
    instance_param: str | None = None  # the alert param naming the instance (key "name:<value>")


#: The kinds that say the circuit breaker is open (it latches: only a reset or a reboot re-arm closes it).
BREAKER_OPEN = (
    "breaker.open",
    "breaker.config_error",
    "breaker.same_cause",
    "breaker.open_at_start",
    "breaker.still_open",
)
#: Every condition (docs/alerts.md "Raised and resolved" has the same table).
CONDITIONS: tuple[Condition, ...] = (
    Condition(
        "breaker",
        BREAKER_OPEN,
        ("breaker.reset",),
        "open for",
    ),
    Condition(
        "serving",
        ("container.died", "emergency.stop", "start.failed", *BREAKER_OPEN),
        ("recovered",),
        "down for",
    ),
    Condition("degraded", ("degraded",), ("recovered",), "degraded for"),
    Condition("auth", ("auth.open", "auth.no_key"), ("auth.enforced",), "open for"),
    Condition("reserve", ("reserve.low",), ("reserve.ok",), "low for"),
    Condition(
        "maintenance",
        ("maintenance.started", "maintenance.missed"),
        ("maintenance.done", "maintenance.failed", "maintenance.cancelled"),
        "took",
    ),
    Condition("docker", ("docker.down",), ("docker.up",), "not answering for"),
    Condition("state_dir", ("state_dir.low",), ("state_dir.ok",), "low for"),
    Condition("contiguity", ("contiguity.low",), ("contiguity.ok",), "low for"),
    Condition("drift", ("drift.found",), ("drift.cleared",), "drifted for"),
    Condition("alerts", ("alerts.failing",), ("alerts.delivering",), "failing for"),
    Condition("companion", ("companion.failing",), ("companion.back",), "failing for", instance_param="name"),
)
#: Resolving kinds that are news of their own: sent even when nothing was raised (an upgrade from a
#: daemon without this tracker, a lost conditions file); with a raised condition they resolve it as usual.
STANDALONE: frozenset[str] = frozenset({"maintenance.done", "maintenance.failed"})
_BY_NAME = {c.name: c for c in CONDITIONS}


def _keys(kind: str, params: tuple[tuple[str, str], ...], resolving: bool) -> tuple[str, ...]:
    out: list[str] = []
    for c in CONDITIONS:
        if kind in (c.resolved_by if resolving else c.raised_by):
            value = dict(params).get(c.instance_param) if c.instance_param else None
            out.append(f"{c.name}:{value}" if value else c.name)
    return tuple(out)


def conditions_of(alert: Alert) -> tuple[tuple[str, ...], bool]:
    """The condition keys ``alert`` raises or resolves, and whether it resolves them.

    The alert's own ``condition``/``resolves`` win; otherwise the table, by ``kind``. ``((), False)``:
    a plain alert (no condition)."""
    if alert.condition:
        return (alert.condition,), alert.resolves
    resolved = _keys(alert.kind, alert.params, resolving=True)
    if resolved:
        return resolved, True
    return _keys(alert.kind, alert.params, resolving=False), False


def lasted_label(key: str) -> str:
    """How the duration of condition ``key`` reads: "open for", "down for", ... ("lasted" if unknown)."""
    c = _BY_NAME.get(key.split(":", 1)[0])
    return c.lasted if c is not None else "lasted"


@dataclass(frozen=True)
class Raised:
    """What raised a condition: the alert's kind and title, and when (epoch s)."""

    kind: str
    title: str
    at: float


@dataclass(frozen=True)
class Cleared:
    """A condition a resolving alert cleared: what had raised it and how long it lasted."""

    condition: str
    raised: Raised
    lasted_s: float

    def detail(self) -> tuple[str, str]:
        """The message row: ``("open for", "2 h 13 min")``."""
        return lasted_label(self.condition), format_duration(self.lasted_s)


@dataclass(frozen=True)
class Verdict:
    """Whether an alert goes to the chat, its history event, and what it raised or cleared."""

    send: bool
    event: str
    conditions: tuple[str, ...] = ()
    resolves: bool = False
    cleared: tuple[Cleared, ...] = ()
    #: The raised set changed (persist it).
    changed: bool = False


@dataclass(frozen=True)
class Conditions:
    """The raised conditions: ``((profile, condition, raised), ...)`` (an immutable value)."""

    raised: tuple[tuple[str, str, Raised], ...] = ()

    def get(self, profile: str, condition: str) -> Raised | None:
        """What raised ``condition`` of ``profile`` (None: not raised)."""
        return next((r for p, c, r in self.raised if p == profile and c == condition), None)

    def decide(self, profile: str, alert: Alert, now: float) -> tuple[Verdict, Conditions]:
        """The verdict for ``alert`` of ``profile`` at wall time ``now`` and the tracker after it."""
        keys, resolves = conditions_of(alert)
        if not keys:
            return Verdict(True, EVENT_RAISED), self
        if not resolves:
            new = [k for k in keys if self.get(profile, k) is None]
            value = replace(
                self,
                raised=(*self.raised, *((profile, k, Raised(alert.kind, alert.title, now)) for k in new)),
            )
            return Verdict(True, EVENT_RAISED, keys, changed=bool(new)), value
        cleared = tuple(
            Cleared(k, r, max(0.0, now - r.at)) for k in keys if (r := self.get(profile, k)) is not None
        )
        if not cleared:
            standalone = alert.kind in STANDALONE and not alert.condition
            event = EVENT_RESOLVED if standalone else EVENT_RESOLVE_UNRAISED
            return Verdict(standalone, event, keys, resolves=True), self
        gone = {c.condition for c in cleared}
        rest = tuple(e for e in self.raised if not (e[0] == profile and e[1] in gone))
        return Verdict(True, EVENT_RESOLVED, keys, True, cleared, changed=True), replace(self, raised=rest)

    # ---- persistence --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (``conditions.json``)."""
        return {
            "version": FORMAT_VERSION,
            "raised": [
                {"profile": p, "condition": c, "kind": r.kind, "title": r.title, "at": r.at}
                for p, c, r in self.raised
            ],
        }

    @classmethod
    def from_dict(cls, data: object) -> Conditions:
        """Inverse of :meth:`to_dict`; ValueError naming the problem when the shape is wrong."""
        if not isinstance(data, dict) or not isinstance(data.get("raised"), list):
            raise ValueError('expected {"version": 1, "raised": [...]}')
        out: list[tuple[str, str, Raised]] = []
        for i, item in enumerate(data["raised"]):
            if not isinstance(item, dict):
                raise ValueError(f"raised[{i}]: expected an object")
            p, c, kind, title, at = (item.get(k) for k in ("profile", "condition", "kind", "title", "at"))
            if not all(isinstance(v, str) for v in (p, c, kind, title)):
                raise ValueError(f"raised[{i}]: profile, condition, kind and title must be strings")
            if not isinstance(at, int | float) or isinstance(at, bool):
                raise ValueError(f"raised[{i}].at: expected a number")
            out.append((str(p), str(c), Raised(str(kind), str(title), float(at))))
        return cls(tuple(out))

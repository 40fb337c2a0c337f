"""Counts for the Prometheus endpoint folded from history events (pure: no I/O, no clock, no locks).

The daemon hands every history event (``state.changed``, ``emergency.stop``, ``backoff.scheduled`` ...) to
:func:`fold_event`; the metrics adapter keeps the resulting frozen :class:`ProfileTally` per profile and
turns it into counters at scrape time. The rules below mirror where the state machine increments its
persisted ``restarts`` and ``emergencies`` counts, so a tally's totals track the status document's:

* a restart is counted on ``backoff.scheduled`` (after a failure) with the cause of the failure that led
  to it, and on ``state.changed`` to PREFLIGHT with reason ``restart`` or ``maintenance`` (a planned one);
* an emergency is counted on ``emergency.stop`` (cause from its reason) and on an unrequested
  ``container.exited`` while the profile was serving (RUNNING/DEGRADED).

Counts made before this process started are not in any event: :func:`seed` records them once from the
status document (``restarts``, ``emergencies_total``, both persisted) as the ``earlier`` cause.

Every cause a counter can take is known in advance (:data:`RESTART_CAUSES`, :data:`EMERGENCY_CAUSES`):
the endpoint shows each at 0 from the first scrape, so Prometheus' ``increase()`` sees the first restart
(a series born at 1 has no earlier sample to increase from).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from supervisor.core.host.kernel_log import KINDS as KERNEL_KINDS
from supervisor.core.vocab import Outcome

#: The cause label of counts made before this daemon process started (read from the status document).
EARLIER = "earlier"
#: The cause label when no failure event preceded a restart.
UNKNOWN = "unknown"
#: Planned restarts (``state.changed`` to PREFLIGHT with one of these reasons).
PLANNED = ("restart", "maintenance")
_SERVING = ("RUNNING", "DEGRADED")
_LABEL_SAFE = re.compile(r"[^a-z0-9_]+")
_MAX_LABEL = 40


@dataclass(frozen=True)
class ProfileTally:
    """Event-derived counts and last values for one profile."""

    restarts: Mapping[str, int] = field(default_factory=dict)
    emergencies: Mapping[str, int] = field(default_factory=dict)
    pending_cause: str | None = None  # the failure a following backoff.scheduled restarts after
    state: str | None = None  # last known state (state.changed ``new``; seeded from the status doc)
    load_s: float | None = None  # duration of the last successful start (start.ready, not adopted)
    seeded: bool = False


def label(text: object) -> str:
    """A bounded, Prometheus-friendly label value (lowercase ``[a-z0-9_]``, at most 40 characters)."""
    value = _LABEL_SAFE.sub("_", str(text).lower()).strip("_")[:_MAX_LABEL]
    return value or UNKNOWN


def emergency_cause(reason: object) -> str:
    """The cause label of an emergency stop from its free-text reason."""
    text = str(reason or "").lower()
    if "probe failure" in text:
        return "probe_failed"
    if "engine dead" in text:
        return "engine_dead"
    if "memory guard" in text:
        return "memory_guard"
    if "memory hard floor" in text:
        return "memory_floor"
    if text.startswith("kernel:"):
        return "kernel_memory"
    if "stall" in text:
        return "stalled"
    if "container exited" in text:
        return "container_exited"
    return "other"


#: The causes :func:`emergency_cause` gives.
EMERGENCY_CAUSES: tuple[str, ...] = (
    "probe_failed",
    "engine_dead",
    "memory_guard",
    "stalled",
    "container_exited",
    "other",
)


def _restart_causes() -> tuple[str, ...]:
    outcomes = tuple(o for o in Outcome if o.failed)
    causes = (*PLANNED, *EMERGENCY_CAUSES, *(label(o) for o in outcomes), UNKNOWN, EARLIER)
    return tuple(dict.fromkeys(causes))


def _bump(counts: Mapping[str, int], key: str, n: int = 1) -> dict[str, int]:
    out = dict(counts)
    out[key] = out.get(key, 0) + n
    return out


def fold_event(t: ProfileTally, name: str, fields: Mapping[str, Any]) -> ProfileTally:
    """The tally after one history event of this profile (events it does not count leave it unchanged)."""
    if name == "state.changed":
        new = str(fields.get("new") or "")
        if new == "PREFLIGHT" and fields.get("reason") in PLANNED:
            t = replace(t, restarts=_bump(t.restarts, str(fields["reason"])))
        if new in ("RUNNING", "FATAL", "STOPPED"):
            t = replace(t, pending_cause=None)
        return replace(t, state=new or t.state)
    if name == "start.failed":
        return replace(t, pending_cause=label(fields.get("outcome") or "failed"))
    if name == "emergency.stop":
        cause = emergency_cause(fields.get("reason"))
        return replace(t, emergencies=_bump(t.emergencies, cause), pending_cause=cause)
    if name == "container.exited" and not fields.get("requested"):
        if t.state in _SERVING:
            t = replace(t, emergencies=_bump(t.emergencies, "container_exited"))
        return replace(t, pending_cause="container_exited")
    if name == "backoff.scheduled":
        return replace(t, restarts=_bump(t.restarts, t.pending_cause or UNKNOWN), pending_cause=None)
    if name == "start.ready" and not fields.get("adopted"):
        load_s = fields.get("load_s")
        if isinstance(load_s, int | float) and not isinstance(load_s, bool):
            return replace(t, load_s=float(load_s))
    return t


#: Every cause a restart is counted under (planned, after an emergency, after a failed start).
RESTART_CAUSES: tuple[str, ...] = _restart_causes()
#: Every kernel event kind the kernel-log classifier gives (the kernel_events counter's ``kind``).
KERNEL_EVENT_KINDS: tuple[str, ...] = tuple(label(k) for k in KERNEL_KINDS)


def with_zeros(counts: Mapping[str, int], known: tuple[str, ...]) -> dict[str, int]:
    """``counts`` with every ``known`` key present (0 when not counted yet), in a stable order."""
    return {**dict.fromkeys(known, 0), **counts}


def kernel_kinds(name: str, fields: Mapping[str, Any]) -> list[str]:
    """Kernel event kinds in an event: ``kernel.<kind>`` (one), ``start.diagnosed`` (its ``kernel`` list)."""
    if name.startswith("kernel."):
        return [label(name.removeprefix("kernel."))]
    if name == "start.diagnosed":
        kinds = fields.get("kernel")
        if isinstance(kinds, list | tuple):
            return [label(k) for k in kinds]
    return []


def undelivered_key(name: str, fields: Mapping[str, Any]) -> tuple[str, str] | None:
    """(channel, reason) of an ``alert.undelivered`` event (the channel's name as configured), else None."""
    if name != "alert.undelivered":
        return None
    return str(fields.get("channel") or UNKNOWN)[:_MAX_LABEL], label(fields.get("reason") or UNKNOWN)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def seed(t: ProfileTally, status_profile: Mapping[str, Any]) -> ProfileTally:
    """Once per profile: counts the status document holds beyond the tally become the ``earlier`` cause."""
    if t.seeded:
        return t
    restarts = _int(status_profile.get("restarts")) - sum(t.restarts.values())
    emergencies = _int(status_profile.get("emergencies_total")) - sum(t.emergencies.values())
    state = status_profile.get("state")
    return replace(
        t,
        restarts=_bump(t.restarts, EARLIER, restarts) if restarts > 0 else t.restarts,
        emergencies=_bump(t.emergencies, EARLIER, emergencies) if emergencies > 0 else t.emergencies,
        state=t.state or (state if isinstance(state, str) else None),
        seeded=True,
    )

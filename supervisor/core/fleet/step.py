"""The fleet step (pure): ``step(fleet, event, now, profiles, policy) -> (fleet, actions)``.

The per-profile machine (core/machine/) decides for one profile; this step decides what needs the whole
daemon: the clock's duties (tick.py: maintenance, companions, the sentinel, the settle, the heartbeat, the
digest, the flight record), Docker's health, the memory guard, the state directory's free space, whose
process a kernel line names, the companions' and the canary's answers, the alert channels' health, the
seats (which of a profile's actions run now). It reads the profiles' snapshots but never changes them: what
a profile must hear is a :class:`Dispatch` the loop hands to that profile's machine. Everything else it
wants done is data too (records, alerts, pool jobs, writes). docs/state-machine.md "The fleet step".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from supervisor.core.actions import Alert
from supervisor.core.alerts.channels import ChannelHealth, Delivery
from supervisor.core.alerts.localize import title_en
from supervisor.core.fleet import companion_step, memory, seat_step, sentinel
from supervisor.core.fleet.actions import Dispatch, FleetAction, Raise, Record
from supervisor.core.fleet.docker import on_ping
from supervisor.core.fleet.events import (
    CanaryMeasured,
    ChannelReported,
    Claimed,
    CompanionChecked,
    ContiguitySampled,
    DiskSampled,
    DockerPinged,
    FleetEvent,
    KernelLine,
    MemorySampled,
    Noted,
    Stepped,
    Tick,
)
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.tick import tick
from supervisor.core.host.attribution import attribute
from supervisor.core.host.contiguity import Contiguity, contiguity_alert
from supervisor.core.host_events import KernelReport
from supervisor.core.profile_state import ProfileState
from supervisor.core.vocab import DAEMON_PROFILE


def step(
    fleet: FleetState,
    event: FleetEvent,
    now: float,
    profiles: Mapping[str, ProfileState],
    policy: FleetPolicy,
) -> tuple[FleetState, list[FleetAction]]:
    """The fleet state after ``event`` at wall time ``now``, and what to do about it."""
    match event:
        case Tick():
            return tick(fleet, now, profiles, policy)
        case DockerPinged(ok=ok, error=error):
            health, out = on_ping(fleet.docker, ok, error, now)
            return replace(fleet, docker=health), list(out)
        case MemorySampled():
            return memory.on_sample(fleet, event, profiles, policy.memory)
        case KernelLine():
            return fleet, kernel_line(event, profiles, fleet.host.get("mem_available_gib"))
        case CompanionChecked():
            return companion_step.checked(fleet, event, policy, now)
        case Noted(name=name, fields=fields):
            return fleet, [Record("", name, dict(fields))]
        case ChannelReported(delivery=d):
            return channel_report(fleet, d, now)
        case Stepped():
            return seat_step.stepped(fleet, event, profiles, policy)
        case Claimed():
            return seat_step.claimed(fleet, event, policy), []
        case CanaryMeasured():
            return sentinel.measured(fleet, event, now, policy)
        case DiskSampled(free_gib=free):
            return state_dir_space(fleet, free, policy.state_dir_min_free_gib)
        case ContiguitySampled(contiguity=c):
            return contiguity_sample(fleet, c, policy.contiguity_min_free_blocks)


def contiguity_sample(
    fleet: FleetState, c: Contiguity, threshold: int
) -> tuple[FleetState, list[FleetAction]]:
    """Free contiguous memory (``daemon.host.contiguity``): under ``threshold`` free 4 MiB blocks the
    ``contiguity.low`` warning with the field's advice, once; back over it ``contiguity.ok`` resolves it."""
    watch, change = replace(fleet.contiguity, min_free_blocks=threshold).observe(c)
    shown = {**c.to_dict(), "threshold": threshold, "low": watch.low}
    fleet = replace(fleet, contiguity=watch, host={**fleet.host, "contiguity": shown})
    if change is None:
        return fleet, []
    fields = {
        "free_4mib_blocks": c.free_blocks,
        "largest_free_mib": c.largest_bytes >> 20,
        "threshold": threshold,
    }
    alert = contiguity_alert(change, c, threshold)
    return fleet, [Record(DAEMON_PROFILE, f"host.contiguity_{change}", fields), Raise(DAEMON_PROFILE, alert)]


def state_dir_space(fleet: FleetState, free: float, limit: float) -> tuple[FleetState, list[FleetAction]]:
    """Free space on the state directory (``daemon.host.state_dir_free_gib``): below ``limit`` a warning,
    ``state_dir.low``, once; back above it ``state_dir.ok`` resolves it (also one an earlier run raised)."""
    fleet = replace(fleet, host={**fleet.host, "state_dir_free_gib": round(free, 2)})
    low = limit > 0 and free < limit
    if low == fleet.state_dir_low:
        return fleet, []
    kind, (old, new) = ("state_dir.low", ("ok", "low")) if low else ("state_dir.ok", ("low", "ok"))
    why = f"{free:.2f} GiB free on the state directory, {'below' if low else 'back above'} {limit:g} GiB"
    alert = Alert(
        "warning" if low else "info", title_en(kind, ()), old, new, why, kind=kind, resolves=not low
    )
    record = Record(DAEMON_PROFILE, kind, {"free_gib": round(free, 2), "min_free_gib": limit})
    return replace(fleet, state_dir_low=low), [record, Raise(DAEMON_PROFILE, alert)]


def channel_report(fleet: FleetState, d: Delivery, now: float) -> tuple[FleetState, list[FleetAction]]:
    """One message's fate on one alert channel: a loss is a history event (nothing lost silently); a
    channel's flip raises ``alerts.failing`` or resolves it with ``alerts.delivering``."""
    health = fleet.channels.get(d.channel) or ChannelHealth(d.channel, d.channel_kind)
    health, alert = health.observe(d, now)
    fleet = replace(fleet, channels={**fleet.channels, d.channel: health})
    out: list[FleetAction] = [] if d.ok else [Record(DAEMON_PROFILE, "alert.undelivered", d.fields())]
    return fleet, out + ([Raise(DAEMON_PROFILE, alert)] if alert is not None else [])


def channel_status(fleet: FleetState, policy: FleetPolicy) -> dict[str, Any]:
    """``daemon.alerts`` of the status document: every configured channel, in config order."""
    health = [fleet.channels.get(name) or ChannelHealth(name, kind) for name, kind in policy.channels]
    health += [h for name, h in fleet.channels.items() if name not in {n for n, _ in policy.channels}]
    return {"undelivered": sum(h.undelivered for h in health), "channels": [h.to_dict() for h in health]}


def kernel_line(
    ev: KernelLine, profiles: Mapping[str, ProfileState], mem_available_gib: float | None
) -> list[FleetAction]:
    """One classified kernel message: once in the history (``kernel.<kind>``, with whose process it names
    for each profile and whether it is from the backlog), then to every profile's machine with the host's
    latest MemAvailable (the kill rule's headroom: core/host/kernel_rule.py)."""
    whose = attribute(ev.pid, ev.vllm_name, ev.lookup, {n: s.container_id for n, s in profiles.items()})
    fields = {**ev.fields, "whose": whose, "backlog": ev.backlog}
    out: list[FleetAction] = [Record("", f"kernel.{ev.kind}", fields)]
    for name in profiles:
        who = whose.get(name, "nobody")
        report = KernelReport(ev.kind, ev.summary, ev.line[:500], ev.ts, who, ev.backlog, mem_available_gib)
        out.append(Dispatch(name, report))
    return out

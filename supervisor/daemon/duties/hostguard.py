"""The loop's host duties: kernel lines to the profiles (attributed to whose process they name), and the
memory guard's two floors (the debounced one stops with a grace, the hard one kills at once).

Runs on the loop thread, without I/O: the kernel-log follower looked up the pid a line names when it read
it (``KernelLogEvent.lookup``). See docs/wedge.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog

from supervisor.adapters.kernel_log.follower import KernelLogEvent
from supervisor.core import events as E
from supervisor.core.fleet.rules import memory_guard_targets
from supervisor.core.host.contiguity import contiguity_alert
from supervisor.core.host_events import HardFloor, KernelReport
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_STATES
from supervisor.daemon.executor.records import Records
from supervisor.daemon.inbox import Envelope
from supervisor.daemon.sources.host_memory import HostMemory
from supervisor.daemon.sources.kernel_log import history_fields, whose_line

log = structlog.get_logger("supervisor.hostguard")

Dispatch = Callable[[Envelope], None]


def kernel_event(
    ev: KernelLogEvent,
    states: Mapping[str, ProfileState],
    records: Records,
    dispatch: Dispatch,
    mem_available_gib: float | None = None,
) -> None:
    """One classified kernel message: once in the history (``kernel.<kind>``), then to every profile with
    whose process it names, whether it is from the backlog, and the host's latest MemAvailable."""
    summary, fields = history_fields(ev)
    whose = whose_line(ev, {n: s.container_id for n, s in states.items()})
    records.emit("", f"kernel.{ev.kind}", {**fields, "whose": whose, "backlog": ev.backlog})
    for name in states:
        report = KernelReport(
            ev.kind, summary, ev.line[:500], ev.ts, whose.get(name, "nobody"), ev.backlog, mem_available_gib
        )
        dispatch(Envelope(name, report))


def sample_memory(
    mono: float, hostmem: HostMemory, states: Mapping[str, ProfileState], dispatch: Dispatch
) -> None:
    """Host memory when due: below the hard floor every container of ours is killed at once; when the
    debounced guard trips, whom the fleet rule says is stopped (with the emergency grace)."""
    why = hostmem.maybe_sample(mono)
    hard = hostmem.take_hard()
    if hard is not None:
        targets = [n for n, s in states.items() if s.state in CONTAINER_STATES]
        if targets:
            log.error("memory.hard_floor", detail=hard, targets=targets)
        for name in targets:
            dispatch(Envelope(name, HardFloor(hard)))
        return
    if why is None:
        return
    targets = memory_guard_targets({n: s.state for n, s in states.items()})
    log.error("memory.guard_tripped", detail=why, targets=targets)
    for name in targets:
        dispatch(Envelope(name, E.MemoryPressure(why)))


def contiguity(hostmem: HostMemory, records: Records) -> None:
    """The contiguity sentinel after a host-memory sample: ``host.contiguity_low`` / ``host.contiguity_ok``
    in the history and the ``contiguity.low`` warning / ``contiguity.ok`` (docs/wedge.md)."""
    change = hostmem.take_contiguity()
    c = hostmem.contiguity
    if change is None or c is None:
        return
    threshold = hostmem.contiguity_threshold
    fields = {"free_4mib_blocks": c.free_blocks, "largest_free_mib": c.largest_bytes // (1024 * 1024)}
    records.emit("", f"host.contiguity_{change}", {**fields, "threshold": threshold})
    records.alert("", "", contiguity_alert(change, c, threshold), None)

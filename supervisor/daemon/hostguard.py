"""The loop's host duties: kernel lines to the profiles (attributed to whose process they name), and the
memory guard's two floors (the debounced one stops with a grace, the hard one kills at once).

Runs on the loop thread; the only I/O is a ``/proc/PID/cgroup`` read per kernel line that names a pid
(no waiting). See docs/wedge.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import structlog

from supervisor.adapters.kernel_log import KernelLogEvent
from supervisor.adapters.orphans import container_of
from supervisor.core import events as E
from supervisor.core.fleet.rules import memory_guard_targets
from supervisor.core.host.attribution import PidLookup, attribute, container_id_in
from supervisor.core.host.kernel_log import KernelEvent, KernelKind, is_vllm_process
from supervisor.core.host_events import HardFloor, KernelReport
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import CONTAINER_STATES
from supervisor.daemon.hostmem import HostMemory
from supervisor.daemon.inbox import Envelope
from supervisor.daemon.kernel_log import history_fields
from supervisor.daemon.records import Records

log = structlog.get_logger("supervisor.hostguard")

Dispatch = Callable[[Envelope], None]


def lookup_pid(pid: int | None, cgroup: str | None = None) -> PidLookup | None:
    """Whether ``pid`` lives and the container id in its cgroup (None: no pid). ``cgroup``: the victim's
    cgroup as the OOM killer printed it; it names the container even after the process was reaped."""
    if pid is None:
        return None
    if cgroup is not None:
        return PidLookup(True, container_id_in(cgroup))
    alive = os.path.exists(f"/proc/{pid}")
    return PidLookup(alive, container_of(pid) if alive else None)


def kernel_event(
    ev: KernelLogEvent, states: Mapping[str, ProfileState], records: Records, dispatch: Dispatch
) -> None:
    """One classified kernel message: once in the history (``kernel.<kind>``), then to every profile with
    whose process it names."""
    summary, fields = history_fields(ev)
    named = KernelEvent(KernelKind(ev.kind), ev.xid, ev.pci, ev.pid, ev.proc_name, ev.line)
    vllm = is_vllm_process(named) if ev.proc_name is not None else None
    containers = {n: s.container_id for n, s in states.items()}
    whose = attribute(ev.pid, vllm, lookup_pid(ev.pid, ev.cgroup), containers)
    records.emit("", f"kernel.{ev.kind}", {**fields, "whose": whose})
    for name in states:
        report = KernelReport(ev.kind, summary, ev.line[:500], ev.ts, whose.get(name, "nobody"))
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

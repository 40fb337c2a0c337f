"""Pool jobs that settle and inspect the host around a load: each does its I/O and returns the events.

* :func:`settle` runs with the load slot held, right before the container is created: sweep /dev/shm,
  drop the page cache, wait for MemAvailable (answer: ShmSwept, Settled).
* :func:`reserve` reads MemAvailable once the server is ready (answer: ReserveMeasured).
* :func:`after_stop` looks for processes that outlived a container and for memory that did not come back
  (answer: HostAfterStop); with ``host.orphans: kill`` it ends the orphans it may end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from pathlib import Path

import structlog

from supervisor.adapters.docker.adapter import DockerAdapter
from supervisor.adapters.host import system as host
from supervisor.adapters.host.orphans import KillResult, Orphan, find_orphans, kill_orphans
from supervisor.adapters.host.shm import ShmSweep, sweep_shm
from supervisor.config import HostConfig, Profile
from supervisor.core.clock import Clock
from supervisor.core.errors import HostError, SupervisorError
from supervisor.core.events import Event, Settled
from supervisor.core.host.paths import SHM_DIR
from supervisor.core.host.reserve import GIB
from supervisor.core.host_events import HostAfterStop, OrphanSeen, ReserveMeasured, ShmSwept
from supervisor.core.vllm import cmdline
from supervisor.core.vllm.cmdline import DEFAULT_GMU
from supervisor.core.vllm.diagnosis import HOST_RESERVE_GIB
from supervisor.core.vllm.gmu_advice import MemoryFacts

log = structlog.get_logger("supervisor.host_jobs")

#: After a stop, MemAvailable is given this long to come back before it is reported as lost.
MEMORY_BACK_WAIT_S = 10.0
#: Orphans to be killed get this long after SIGTERM before SIGKILL.
ORPHAN_KILL_GRACE_S = 10.0
#: Orphans found for these reasons may be killed (a GPU-device holder may be anyone's: only reported).
#: Only a process in the stopped container's cgroup is proven to be ours; the others are reported.
KILLABLE_REASONS = frozenset({"cgroup"})
#: A container Docker still lists as running is looked at again this many times, this far apart.
STILL_LISTED_TRIES = 20
STILL_LISTED_POLL_S = 0.5

Finder = Callable[[str, Collection[str]], list[Orphan]]


def _mem_gib() -> float | None:
    try:
        return host.mem_available_gib()
    except (HostError, OSError, ValueError):
        return None


def memory_facts(hcfg: HostConfig, mem_before_gib: float | None, gmu: float | None) -> MemoryFacts | None:
    """What a failed start's memory diagnosis needs: MemTotal (read now), MemAvailable before the start,
    ``host.reserve_gib`` (the field's 15 GiB when unset) and the start's gmu (vLLM's default when unset)."""
    try:
        total = host.read_meminfo().get("MemTotal")
    except (HostError, OSError, ValueError):
        return None
    reserve = hcfg.reserve_gib or HOST_RESERVE_GIB
    return MemoryFacts(
        total / GIB if total else None, mem_before_gib, reserve, DEFAULT_GMU if gmu is None else gmu
    )


def settle(
    hcfg: HostConfig,
    clock: Clock,
    shm_dir: Path = SHM_DIR,
    *,
    host_ipc: bool = True,
    gmu: float | None = None,
) -> list[Event]:
    """Sweep /dev/shm, drop caches, wait for memory: may the container be created now?

    The host's /dev/shm is swept only for a container that shares the host's IPC namespace
    (``ipc_mode: host``): only such a container leaks segments there; a private one's /dev/shm goes with it,
    and another user's segments are never touched for a container that could not have made them."""
    before = _mem_gib()
    sweep = sweep_shm(dirpath=shm_dir) if host_ipc else ShmSweep(str(shm_dir), False, (), (), ())
    after = _mem_gib()
    swept = ShmSwept(
        removed=tuple(f"{r.name} ({r.allocated} B)" for r in sweep.removed),
        freed_bytes=sweep.freed_bytes,
        kept=tuple(
            f"{k.name} ({k.reason}{', pids ' + ','.join(map(str, k.pids)) if k.pids else ''})"
            for k in sweep.kept
        ),
        warnings=tuple(sweep.warnings),
        mem_gain_gib=round(after - before, 3) if before is not None and after is not None else None,
    )
    notes: list[str] = []
    if sweep.removed:
        notes.append(
            f"{len(sweep.removed)} leaked /dev/shm segment(s) removed ({sweep.freed_bytes / 2**20:.0f} MiB)"
        )
    if hcfg.drop_caches:
        dropped = host.drop_caches(hcfg.drop_caches_level)
        notes.append("page cache dropped" if dropped else "page cache not dropped (not permitted)")
    ok = True
    mem: float | None
    floor = host.start_floor_gib(hcfg, gmu)
    if floor > 0:
        began = clock.monotonic()
        ok, mem = host.wait_for_memory(floor, hcfg.settle_timeout_s, clock, 1.0)
        waited = clock.monotonic() - began
        notes.append(
            f"MemAvailable {mem:.1f} GiB"
            + (f" >= floor {floor:g} GiB" if ok else f" < floor {floor:g} GiB")
            + f" after waiting {waited:.0f} s"
        )
    else:
        mem = _mem_gib()
    return [swept, Settled(ok, "; ".join(notes), mem)]


def reserve() -> list[Event]:
    """MemAvailable now (the server just became ready)."""
    return [ReserveMeasured(_mem_gib())]


def _wait_memory(target: float | None, clock: Clock) -> float | None:
    if target is None:
        return _mem_gib()
    try:
        return host.wait_for_memory(target, MEMORY_BACK_WAIT_S, clock, 1.0)[1]
    except (HostError, OSError, ValueError):
        return None


def _mine(o: Orphan, container_id: str) -> bool:
    """Killable: still in the cgroup of the container that stopped (proof it is ours)."""
    return o.reason in KILLABLE_REASONS and o.container_id == container_id


def after_stop(
    docker: DockerAdapter,
    container_id: str,
    mem_before_gib: float | None,
    mem_back_gib: float | None,
    hcfg: HostConfig,
    clock: Clock,
    find: Finder = find_orphans,
) -> list[Event]:
    """Processes that outlived ``container_id`` (killed per ``host.orphans``) and MemAvailable after it.

    Another running container's processes are never reported or touched (their ids come from Docker,
    asked again right before any kill). Docker silent: no orphan search (we cannot tell whose is whose).
    """
    orphans: list[Orphan] = []
    for attempt in range(STILL_LISTED_TRIES):
        try:
            orphans = find(container_id, docker.running_ids())
            break
        except ValueError:
            # Docker can list a container as running for a moment after its "die" event; one that stays
            # listed really runs (e.g. left alone on a manual stop): nothing outlived it
            if attempt == STILL_LISTED_TRIES - 1:
                return []
            time.sleep(STILL_LISTED_POLL_S)
        except SupervisorError as exc:
            log.warning("host.orphans.skipped", container_id=container_id[:12], error=str(exc))
            break
    outcome = {o.pid: "reported" for o in orphans}
    targets = [o for o in orphans if _mine(o, container_id)] if hcfg.orphans == "kill" else []
    if targets:
        try:
            running = docker.running_ids()  # a container started meanwhile is never touched
            results: list[KillResult] = kill_orphans(
                targets, ORPHAN_KILL_GRACE_S, container_id=container_id, running_ids=running
            )
        except SupervisorError as exc:
            log.warning("host.orphans.kill_skipped", container_id=container_id[:12], error=str(exc))
            results = []
        outcome.update({r.pid: r.outcome for r in results})
    seen = tuple(OrphanSeen(o.pid, o.name, o.rss_bytes, o.reason, outcome[o.pid]) for o in orphans)
    return [HostAfterStop(container_id, seen, mem_before_gib, _wait_memory(mem_back_gib, clock))]


def settle_for(p: Profile) -> Callable[[HostConfig, Clock], list[Event]]:
    """The settle job of ``p``: the host's /dev/shm is swept only when its container shares the host IPC."""
    host_ipc = p.container.ipc_mode == "host"
    gmu = cmdline.gpu_memory_utilization(cmdline.argv_of(p.container))
    return lambda hcfg, clock: settle(hcfg, clock, host_ipc=host_ipc, gmu=gmu)

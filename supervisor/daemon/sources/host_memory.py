"""Host memory, sampled on a thread of its own every ``host.memory_guard.sample_interval_s``: each sample
(MemAvailable, MemFree, swap, memory PSI) is posted to the inbox as a
:class:`~supervisor.core.fleet.events.MemorySampled`, /proc/buddyinfo's free contiguous memory as a
:class:`~supervisor.core.fleet.events.ContiguitySampled`, the state directory's free space as a
:class:`~supervisor.core.fleet.events.DiskSampled`; the fleet step decides (the memory guard's floors,
``state_dir.low``, the status document's ``daemon.host``).

A sample is two small /proc reads; the guard counts samples, so ``samples: 5`` at an interval of 2 s
means 10 s of low memory before anything is stopped. An unreadable /proc/meminfo is logged and skipped.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import structlog

from supervisor.adapters.host import pressure, system as host
from supervisor.adapters.host.buddyinfo import read_contiguity
from supervisor.adapters.threads import Periodic
from supervisor.core.errors import HostError
from supervisor.core.fleet.events import ContiguitySampled, DiskSampled, FleetEvent, MemorySampled

log = structlog.get_logger("supervisor.hostmem")

GIB = 1024.0**3


def read_sample() -> MemorySampled:
    """One host memory sample now (HostError: /proc/meminfo unreadable)."""
    info = host.read_meminfo()
    psi = pressure.read_psi()
    swap_used, swap_total = pressure.swap_in_use(info)
    return MemorySampled(
        info.get("MemAvailable", 0) / GIB,
        info.get("MemFree", 0) / GIB,
        swap_used / GIB,
        swap_total / GIB,
        psi.some.avg10 if psi is not None else None,
        psi.full.avg10 if psi is not None and psi.full is not None else None,
        psi.some.avg60 if psi is not None else None,
    )


class HostSampler:
    """Posts one host sample (memory, the state directory's free space) every ``interval_s`` (the first at
    once)."""

    def __init__(
        self,
        interval_s: float,
        post: Callable[[FleetEvent], None],
        state_dir: Path,
        buddyinfo: Path | None = None,
    ) -> None:
        self._state_dir = state_dir
        self._buddyinfo = buddyinfo  # a recorded file in tests; None: /proc/buddyinfo or VSUP_BUDDYINFO's
        self._post = post
        self._thread = Periodic("host-sampler", interval_s, self._sample)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _sample(self) -> None:
        """One round: host memory, free contiguous memory, the state directory's free space."""
        try:
            self._post(read_sample())
        except HostError as exc:
            log.warning("memory.unreadable", error=str(exc))
        if (contiguity := read_contiguity(self._buddyinfo)) is not None:  # None: unreadable, skipped
            self._post(ContiguitySampled(contiguity))
        try:
            self._post(DiskSampled(shutil.disk_usage(self._state_dir).free / GIB))
        except OSError as exc:
            log.warning("state_dir.unreadable", error=str(exc))

"""Host memory sampled by the loop every ``host.memory_guard.sample_interval_s``: the memory guard's
input (MemAvailable, MemFree, memory PSI) and the status document's ``daemon.host`` section (plus swap).

A sample is two small /proc reads (no waiting); the guard counts samples, so ``samples: 5`` at an
interval of 2 s means 10 s of low memory before anything is stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from supervisor.adapters.host import pressure, system as host
from supervisor.adapters.host.buddyinfo import BUDDYINFO, read_contiguity
from supervisor.config import MemoryGuardConfig
from supervisor.core.errors import HostError
from supervisor.core.host.contiguity import MIN_FREE_BLOCKS, Contiguity, ContiguityWatch
from supervisor.core.host.memguard import MemoryGuard, hard_floor

log = structlog.get_logger("supervisor.hostmem")

GIB = 1024.0**3


class HostMemory:
    """The memory guard (when enabled) and the last sample, for the status document."""

    def __init__(
        self,
        cfg: MemoryGuardConfig,
        *,
        contiguity_min_free_blocks: int = MIN_FREE_BLOCKS,
        buddyinfo: Path = BUDDYINFO,
    ) -> None:
        self._interval = cfg.sample_interval_s
        self._buddyinfo = buddyinfo
        self._contiguity = ContiguityWatch(contiguity_min_free_blocks)
        #: The last /proc/buddyinfo figures (None: none yet, or unreadable)
        self.contiguity: Contiguity | None = None
        self._contiguity_change: str | None = None
        self._guard: MemoryGuard | None = (
            MemoryGuard(
                cfg.mem_available_min_gib,
                cfg.samples,
                cfg.memfree_min_gib,
                cfg.memavailable_below_gib,
                cfg.psi_full_avg10_max,
            )
            if cfg.enabled
            else None
        )
        self._cfg = cfg
        self._next = 0.0
        self._last: dict[str, Any] = {}
        #: Why the last sample was below the hard floor (None: it was not, or the guard is off).
        self.hard: str | None = None

    def maybe_sample(self, mono: float) -> str | None:
        """Sample when due; the memory guard's reason when it trips, else None."""
        if mono < self._next:
            return None
        self._next = mono + self._interval
        try:
            info = host.read_meminfo()
        except HostError as exc:
            log.warning("memory.unreadable", error=str(exc))
            return None
        avail, free = info.get("MemAvailable", 0) / GIB, info.get("MemFree", 0) / GIB
        psi = pressure.read_psi()
        swap_used, swap_total = pressure.swap_in_use(info)
        full10 = psi.full.avg10 if psi is not None and psi.full is not None else None
        self._last = {
            "mem_available_gib": round(avail, 2),
            "mem_free_gib": round(free, 2),
            "swap_used_gib": round(swap_used / GIB, 3),
            "swap_total_gib": round(swap_total / GIB, 3),
            "psi": (
                {"some_avg10": psi.some.avg10, "full_avg10": full10, "some_avg60": psi.some.avg60}
                if psi is not None
                else None
            ),
            "memory_guard": "on" if self._guard is not None else "off",
        }
        self._sample_contiguity()
        if self._guard is None:
            return None
        c = self._cfg
        self.hard = hard_floor(
            avail,
            free,
            mem_available_min_gib=c.hard_mem_available_min_gib,
            memfree_min_gib=c.hard_memfree_min_gib,
            memavailable_below_gib=c.memavailable_below_gib,
        )
        self._guard, why = self._guard.observe(avail, free, full10)
        return why

    def _sample_contiguity(self) -> None:
        c = read_contiguity(self._buddyinfo)
        self.contiguity = c
        if c is None:
            return
        self._contiguity, change = self._contiguity.observe(c)
        if change is not None:
            self._contiguity_change = change
        watch = self._contiguity
        self._last["contiguity"] = {**c.to_dict(), "threshold": watch.min_free_blocks, "low": watch.low}

    @property
    def contiguity_threshold(self) -> int:
        """The contiguity sentinel's threshold (free 4 MiB blocks; 0 = off)."""
        return self._contiguity.min_free_blocks

    def take_contiguity(self) -> str | None:
        """``"low"`` / ``"ok"`` once when free contiguous memory crossed the threshold (None: it did not)."""
        change, self._contiguity_change = self._contiguity_change, None
        return change

    def take_hard(self) -> str | None:
        """Why the last sample was below the hard floor, once (None: it was not)."""
        why, self.hard = self.hard, None
        return why

    def status(self) -> dict[str, Any]:
        """The last sample (empty before the first)."""
        return dict(self._last)

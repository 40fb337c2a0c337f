"""The debounced memory watchdog (docs/field-notes.md item 3): stop the model before unified memory runs out.

Exhausting unified memory hangs the kernel (no OOM kill, no log). The guard trips when
MemAvailable stays below ``mem_available_min_gib`` for ``samples`` consecutive samples, or MemFree
stays below ``memfree_min_gib`` while MemAvailable is below ``memavailable_below_gib`` for as many
samples. A single noisy sample never trips it (that killed healthy servers), and weight loading that
streams through the page cache (low MemFree, high MemAvailable) does not either. Where the kernel has
memory PSI, a sample whose ``full avg10`` (share of the last 10 s in which every task stalled on memory)
is above ``psi_full_avg10_max`` counts as a bad sample too (0 = off): the host thrashing before
MemAvailable says so. A pure value: feed it samples, read the decision.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MemoryGuard:
    """Consecutive low-memory samples so far, and the thresholds."""

    mem_available_min_gib: float = 6.0
    samples: int = 5
    memfree_min_gib: float = 2.0
    memavailable_below_gib: float = 10.0
    psi_full_avg10_max: float = 0.0  # percent; 0 = PSI does not count
    low_streak: int = 0

    def observe(
        self, mem_available_gib: float, mem_free_gib: float, psi_full_avg10: float | None = None
    ) -> tuple[MemoryGuard, str | None]:
        """Take one sample; the new guard and, when it trips, a reason (the streak then restarts).

        ``psi_full_avg10``: memory PSI ``full avg10`` in percent (None: the kernel has no PSI).
        """
        low_available = mem_available_gib < self.mem_available_min_gib
        low_free = mem_free_gib < self.memfree_min_gib and mem_available_gib < self.memavailable_below_gib
        stalled = (
            self.psi_full_avg10_max > 0
            and psi_full_avg10 is not None
            and psi_full_avg10 > self.psi_full_avg10_max
        )
        if not (low_available or low_free or stalled):
            return (replace(self, low_streak=0) if self.low_streak else self), None
        streak = self.low_streak + 1
        if streak < self.samples:
            return replace(self, low_streak=streak), None
        if low_available:
            why = f"MemAvailable {mem_available_gib:.1f} GiB < {self.mem_available_min_gib:g} GiB"
        elif stalled:
            why = (
                f"memory pressure (PSI full avg10) {psi_full_avg10:.1f}% > {self.psi_full_avg10_max:g}% "
                f"with MemAvailable {mem_available_gib:.1f} GiB"
            )
        else:
            why = (
                f"MemFree {mem_free_gib:.1f} GiB < {self.memfree_min_gib:g} GiB with MemAvailable "
                f"{mem_available_gib:.1f} GiB < {self.memavailable_below_gib:g} GiB"
            )
        return replace(self, low_streak=0), f"{why} for {streak} consecutive samples"


def hard_floor(
    mem_available_gib: float,
    mem_free_gib: float,
    *,
    mem_available_min_gib: float,
    memfree_min_gib: float,
    memavailable_below_gib: float,
) -> str | None:
    """The hard floor (no debounce, no grace): why one sample is below it, or None.

    MemAvailable below ``mem_available_min_gib``, or MemFree below ``memfree_min_gib`` while MemAvailable is
    below ``memavailable_below_gib`` too (low MemFree alone is the page cache at work: weights streaming
    through it, never a reason to kill). A threshold of 0 is off.
    """
    if mem_available_min_gib > 0 and mem_available_gib < mem_available_min_gib:
        return f"MemAvailable {mem_available_gib:.2f} GiB < hard floor {mem_available_min_gib:g} GiB"
    if memfree_min_gib > 0 and mem_free_gib < memfree_min_gib and mem_available_gib < memavailable_below_gib:
        return (
            f"MemFree {mem_free_gib:.2f} GiB < hard floor {memfree_min_gib:g} GiB with MemAvailable "
            f"{mem_available_gib:.2f} GiB < {memavailable_below_gib:g} GiB"
        )
    return None

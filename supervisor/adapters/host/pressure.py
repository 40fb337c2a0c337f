"""Host memory pressure: PSI from /proc/pressure/memory and swap in use from /proc/meminfo.

PSI (pressure stall information, Linux >= 4.20 with CONFIG_PSI) says which share of wall time tasks
were stalled waiting for memory: ``some`` (at least one task) and ``full`` (all non-idle tasks), as
averages over 10/60/300 s in percent and a ``total`` in microseconds. A kernel without PSI (or booted
with ``psi=0``) has no such file, or one that cannot be read (EOPNOTSUPP): then :func:`read_psi`
returns None, never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from supervisor.adapters.host.system import MEMINFO, read_meminfo

PSI_MEMORY = Path("/proc/pressure/memory")


@dataclass(frozen=True)
class PsiLine:
    """One PSI line: averages in percent of wall time, total stall time in microseconds."""

    avg10: float
    avg60: float
    avg300: float
    total_us: int


@dataclass(frozen=True)
class MemoryPressure:
    """``some``: at least one task stalled on memory; ``full``: all non-idle tasks (None on old kernels)."""

    some: PsiLine
    full: PsiLine | None


@dataclass(frozen=True)
class HostPressure:
    """One sample: PSI (None without PSI) and swap (bytes; 0 used / 0 total on a box without swap)."""

    psi: MemoryPressure | None
    swap_used_bytes: int
    swap_total_bytes: int


def _parse_line(rest: str) -> PsiLine | None:
    fields: dict[str, str] = {}
    for part in rest.split():
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = value
    try:
        return PsiLine(
            avg10=float(fields["avg10"]),
            avg60=float(fields["avg60"]),
            avg300=float(fields["avg300"]),
            total_us=int(fields["total"]),
        )
    except (KeyError, ValueError):
        return None


def parse_psi(text: str) -> MemoryPressure | None:
    """The ``some``/``full`` lines of a PSI file; None when ``some`` is missing or malformed."""
    lines: dict[str, PsiLine | None] = {}
    for raw in text.splitlines():
        kind, _, rest = raw.strip().partition(" ")
        if kind in ("some", "full"):
            lines[kind] = _parse_line(rest)
    some = lines.get("some")
    if some is None:
        return None
    return MemoryPressure(some=some, full=lines.get("full"))


def read_psi(path: Path = PSI_MEMORY) -> MemoryPressure | None:
    """Memory PSI now, or None when the kernel has none (absent file, EOPNOTSUPP, unparsable)."""
    try:
        text = path.read_text(encoding="ascii")
    except OSError:
        return None
    return parse_psi(text)


def swap_in_use(meminfo: dict[str, int]) -> tuple[int, int]:
    """(used, total) swap in bytes from a :func:`read_meminfo` result (0, 0 without swap lines)."""
    total = meminfo.get("SwapTotal", 0)
    free = meminfo.get("SwapFree", 0)
    return max(total - free, 0), total


def sample(psi_path: Path = PSI_MEMORY, meminfo_path: Path = MEMINFO) -> HostPressure:
    """PSI and swap now; raises HostError only when /proc/meminfo itself cannot be read."""
    used, total = swap_in_use(read_meminfo(meminfo_path))
    return HostPressure(psi=read_psi(psi_path), swap_used_bytes=used, swap_total_bytes=total)

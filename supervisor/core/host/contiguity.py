"""The contiguity sentinel (docs/wedge.md "The contiguity sentinel"): free physically contiguous memory from
``/proc/buddyinfo``, and when it is too little. Pure: text and numbers in, values out.

On GB10 the host wedges when physically contiguous memory runs out while MemAvailable still looks fine
(docs/field-notes.md "The GB10 wedge follows contiguous memory"): 0 free 4 MiB blocks while ``nvidia-smi``
blocked for 8-12 minutes; after 7 days, 0 free blocks of 32 MiB or more with ~118 GiB MemAvailable. A
restart of the model does not give them back (compaction did not either); a reboot does.

``/proc/buddyinfo``: one line per node and zone, ``Node 0, zone   Normal   c0 c1 ... cN``: ``ck`` free
blocks of 2^k pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from supervisor.core.actions import Alert

MIB: Final = 1024 * 1024
#: A "high-order" block: 4 MiB or more (order 10 on 4 KiB pages, order 6 on 64 KiB pages).
BLOCK_BYTES: Final = 4 * MIB
#: Warn under this many free 4 MiB blocks' worth of memory in blocks of 4 MiB or more, host-wide (1 GiB):
#: the derivation is in docs/wedge.md "The contiguity sentinel".
MIN_FREE_BLOCKS: Final = 256


@dataclass(frozen=True)
class BuddyZone:
    """One node and zone of /proc/buddyinfo: free blocks by order (index k: blocks of 2^k pages)."""

    node: int
    zone: str
    free: tuple[int, ...]


def parse_buddyinfo(text: str) -> tuple[BuddyZone, ...]:
    """The zones of ``/proc/buddyinfo`` text; malformed lines are skipped."""
    out: list[BuddyZone] = []
    for line in text.splitlines():
        head, sep, rest = line.partition(", zone")
        parts = rest.split()
        if not sep or not head.startswith("Node ") or len(parts) < 2:
            continue
        try:
            node = int(head.removeprefix("Node ").strip())
            free = tuple(int(p) for p in parts[1:])
        except ValueError:
            continue
        out.append(BuddyZone(node, parts[0], free))
    return tuple(out)


def high_order(page_size: int, block_bytes: int = BLOCK_BYTES) -> int:
    """The smallest order whose blocks hold ``block_bytes`` (10 for 4 MiB on 4 KiB pages)."""
    order = 0
    while (page_size << order) < block_bytes:
        order += 1
    return order


@dataclass(frozen=True)
class Contiguity:
    """Free contiguous memory now: in 4 MiB blocks' worth (host-wide), and the largest free block."""

    free_blocks: int  # memory in blocks >= 4 MiB, counted in 4 MiB units
    free_bytes: int  # the same in bytes
    largest_bytes: int  # the largest free block anywhere (0: none)
    zones: tuple[BuddyZone, ...]
    page_size: int

    def to_dict(self) -> dict[str, object]:
        """For the status document and the flight recorder."""
        return {
            "free_4mib_blocks": self.free_blocks,
            "free_high_order_gib": round(self.free_bytes / (1024 * MIB), 3),
            "largest_free_mib": self.largest_bytes // MIB,
            "page_size": self.page_size,
            "zones": [{"node": z.node, "zone": z.zone, "free": list(z.free)} for z in self.zones],
        }


def measure(zones: tuple[BuddyZone, ...], page_size: int, block_bytes: int = BLOCK_BYTES) -> Contiguity:
    """How much free memory sits in blocks of ``block_bytes`` or more, and the largest free block."""
    lo = high_order(page_size, block_bytes)
    total = 0
    largest = 0
    for z in zones:
        for order, count in enumerate(z.free):
            size = page_size << order
            if count > 0:
                largest = max(largest, size)
            if order >= lo:
                total += count * size
    return Contiguity(total // block_bytes, total, largest, zones, page_size)


@dataclass(frozen=True)
class ContiguityWatch:
    """Whether the host is below the threshold now (the warning is raised), and the threshold."""

    min_free_blocks: int = MIN_FREE_BLOCKS
    low: bool | None = None  # None: no sample yet

    def observe(self, c: Contiguity) -> tuple[ContiguityWatch, str | None]:
        """Take one sample; ``"low"`` when it falls under the threshold, ``"ok"`` when it is back over it
        (None: no change). The first sample is a change either way (an ``ok`` then resolves what an earlier
        daemon raised, and is not sent when nothing was). A threshold of 0 is off."""
        if self.min_free_blocks <= 0:
            return self, None
        below = c.free_blocks < self.min_free_blocks
        if below == self.low:
            return self, None
        return ContiguityWatch(self.min_free_blocks, below), "low" if below else "ok"


def low_text(c: Contiguity, min_free_blocks: int) -> str:
    """The warning's reason: the figures and the field's advice."""
    return (
        f"free contiguous memory {c.free_blocks} x 4 MiB ({c.free_bytes / (1024 * MIB):.2f} GiB in blocks of "
        f"4 MiB or more; largest free block {c.largest_bytes // MIB} MiB) < {min_free_blocks} x 4 MiB: "
        "GB10 hosts wedged at 0 with MemAvailable still high. A restart of the model does not give the "
        "blocks back; a reboot does: schedule one"
    )


def contiguity_at_start(free_blocks: int | None, min_free_blocks: int) -> str | None:
    """What a start says when the host is below the threshold as it begins (None: it is not, or unknown)."""
    if free_blocks is None or min_free_blocks <= 0 or free_blocks >= min_free_blocks:
        return None
    return (
        f"starting with the host low on contiguous memory: {free_blocks} x 4 MiB free in blocks of 4 MiB or "
        f"more (< {min_free_blocks}); the load may stall or the host wedge. A restart of the model does not "
        "give the blocks back; a reboot does: schedule one"
    )


def contiguity_alert(change: str, c: Contiguity, min_free_blocks: int) -> Alert:
    """``contiguity.low`` (warning: the figures and the advice) or ``contiguity.ok`` (info: resolves it)."""
    if change == "low":
        return Alert(
            "warning",
            "host low on contiguous memory",
            "ok",
            "low",
            low_text(c, min_free_blocks),
            kind="contiguity.low",
            params=(("blocks", str(c.free_blocks)), ("threshold", str(min_free_blocks))),
        )
    return Alert(
        "info",
        "host contiguous memory ok again",
        "low",
        "ok",
        f"free contiguous memory {c.free_blocks} x 4 MiB >= {min_free_blocks} x 4 MiB",
        kind="contiguity.ok",
    )

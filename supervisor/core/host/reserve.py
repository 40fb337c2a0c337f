"""The host memory reserve: after a model is loaded, MemAvailable must stay above a floor. Pure, no I/O.

On a unified-memory box the GPU and the host share RAM; a server that leaves the host less than the
reserve (15 GiB by default in the field) can freeze the kernel under load with no OOM kill and no log.
"""

from __future__ import annotations

GIB = 1024**3


def reserve_verdict(mem_available_bytes: int, reserve_gib: float) -> str | None:
    """A sentence with the numbers when MemAvailable (after the load) is below the reserve, else None."""
    if reserve_gib <= 0:
        return None
    available_gib = mem_available_bytes / GIB
    if mem_available_bytes >= reserve_gib * GIB:
        return None
    return (
        f"MemAvailable {available_gib:.1f} GiB after load < reserve {reserve_gib:g} GiB: "
        "the host may freeze under load; lower --gpu-memory-utilization"
    )

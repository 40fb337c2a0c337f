"""The host memory reserve: after a model is loaded, MemAvailable must stay above a floor. Pure, no I/O.

On a unified-memory box the GPU and the host share RAM; a server that leaves the host less than the
reserve (15 GiB by default in the field) can freeze the kernel under load with no OOM kill and no log.
"""

from __future__ import annotations

from supervisor.core.vllm.cmdline import DEFAULT_GMU

GIB = 1024**3


def memory_floor_gib(gmu: float | None, mem_total_gib: float, reserve_gib: float) -> float:
    """MemAvailable a start needs on a unified-memory box: what vLLM's free-memory check wants
    (``gpu_memory_utilization x`` total memory: "Free memory on device ... is less than desired GPU memory
    utilization") plus the host reserve the box keeps once the model is loaded (docs/operations.md)."""
    return (DEFAULT_GMU if gmu is None else gmu) * mem_total_gib + reserve_gib


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

"""A number, not a rule: the ``--gpu-memory-utilization`` that would have left the host its reserve (pure).

On a unified-memory box vLLM takes its budget, ``gmu x`` total memory (weights + activations + graphs + a KV
pool that fills the rest), out of the memory the host had free when the container was created; the host
keeps what is left. Field report 000 did this arithmetic by hand on a Thor (MemTotal 122.86 GiB, 113.85 GiB
available at start, a 15 GiB reserve): at 0.88 vLLM took 108.12 GiB and the host kept ~5 GiB (the driver then
failed with NV_ERR_NO_MEMORY); 0.80 kept 15-17 GiB and its KV pool was 22.91 GiB. :func:`advise` does the
same from what this box and this config measured: MemTotal, MemAvailable before the start, the weights' GiB
and the KV pool from the log (the bigger of the two estimates of what vLLM took), and the reserve. When even
the pool-less budget would not keep the reserve (the weights alone are too big: report 000's first rounds,
0.92 and 0.89 died, 0.86 lived on ~8 GiB), it says that no gmu both keeps the reserve and leaves a KV pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from supervisor.core.vllm.cmdline import DEFAULT_GMU


@dataclass(frozen=True)
class GmuAdvice:
    """What the start at ``at_gmu`` used and left; the gmu that keeps ``reserve_gib`` (None: none does)."""

    at_gmu: float
    used_gib: float  # what vLLM took (its budget, or weights + KV pool if more)
    left_gib: float  # what the host kept
    reserve_gib: float
    gmu: float | None  # the highest gmu (2 decimals, rounded down) that keeps the reserve with a KV pool
    kv_at_gmu_gib: float | None  # the KV pool that gmu leaves (None: the log gave no pool)

    def text(self) -> str:
        at = (
            f"at --gpu-memory-utilization {self.at_gmu:g} vLLM took ~{self.used_gib:.1f} GiB and the host "
            f"kept ~{self.left_gib:.1f} GiB"
        )
        if self.gmu is None:
            return (
                f"{at}; no --gpu-memory-utilization both keeps the {self.reserve_gib:g} GiB host reserve and "
                "leaves a KV pool: the weights are too big for this box (offload or quantize them)"
            )
        pool = f", KV pool ~{self.kv_at_gmu_gib:.1f} GiB" if self.kv_at_gmu_gib is not None else ""
        keeps = f"--gpu-memory-utilization {self.gmu:.2f} keeps the {self.reserve_gib:g} GiB host reserve"
        return f"{at}; {keeps}{pool}"


@dataclass(frozen=True)
class MemoryFacts:
    """What the box and the start measured, for :func:`advise_report` (``mem_available_gib``: before it)."""

    mem_total_gib: float | None
    mem_available_gib: float | None
    reserve_gib: float
    gmu: float | None


#: Machine outcomes and log causes that are driver or host memory (the advice applies to them).
MEMORY_OUTCOMES = frozenset(
    {"failed_oom", "failed_gpu_mem_util", "failed_oom_killed", "failed_memory_guard", "failed_kernel_memory"}
)


def advise_report(vllm: dict[str, object], facts: MemoryFacts) -> GmuAdvice | None:
    """:func:`advise` with the log's figures (vLLM's own free-memory check's numbers when it refused)."""
    total, available = facts.mem_total_gib, facts.mem_available_gib
    if vllm.get("outcome") == "failed_gpu_mem_util":
        total = _num(vllm.get("total_gib")) or total
        available = _num(vllm.get("free_gib")) or available
    gmu = facts.gmu if facts.gmu is not None else _num(vllm.get("util"))
    if gmu is None:
        return None  # the start's gmu is unknown (an offline log without --gmu)
    weights, kv = _num(vllm.get("model_load_gib")), _num(vllm.get("available_kv_gib"))
    return advise(total, available, facts.reserve_gib, gmu, weights, kv)


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def advise(
    mem_total_gib: float | None,
    mem_available_gib: float | None,
    reserve_gib: float,
    gmu: float | None,
    weights_gib: float | None = None,
    kv_gib: float | None = None,
) -> GmuAdvice | None:
    """The advice for a start that died of driver or host memory (None without MemTotal and MemAvailable)."""
    if not mem_total_gib or mem_available_gib is None or mem_total_gib <= 0:
        return None
    at = DEFAULT_GMU if gmu is None else gmu
    used = at * mem_total_gib
    if weights_gib is not None and kv_gib is not None:
        used = max(used, weights_gib + kv_gib)
    left = mem_available_gib - used
    target = math.floor((at - (reserve_gib - left) / mem_total_gib) * 100 + 1e-9) / 100
    kv_then = kv_gib - (at - target) * mem_total_gib if kv_gib is not None else None
    too_big = target <= 0 or (kv_then is not None and kv_then <= 0)
    if weights_gib is not None and target * mem_total_gib <= weights_gib:
        too_big = True
    return GmuAdvice(
        at_gmu=at,
        used_gib=round(used, 2),
        left_gib=round(left, 2),
        reserve_gib=reserve_gib,
        gmu=None if too_big else target,
        kv_at_gmu_gib=None if too_big or kv_then is None else round(kv_then, 2),
    )

"""Which box this is (Jetson Thor, DGX Spark, other) and the host defaults measured for it (pure).

``supervisorctl init`` reads the facts (the device-tree model, the GPU names ``nvidia-smi`` lists, MemTotal)
and calls :func:`detect_box`; :func:`host_section` and :func:`startup_section` give the ``host:`` part of
the daemon config and the ``startup:`` part of the profile. Every number comes from the field reports
(docs/field-notes.md, the shipped ``daemon.thor.yaml`` / ``daemon.spark.yaml``); an "other" box gets the
config's own defaults and no memory guard (its GPU memory is not the host's MemAvailable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

THOR: Final = "thor"
SPARK: Final = "spark"
OTHER: Final = "other"

#: Field report 000: the driver fails with NV_ERR_NO_MEMORY when the host keeps less than this (Thor); the
#: Spark keeps the same (seed 003 measured >= 25.6 GiB available during a load at gmu 0.8).
RESERVE_GIB: Final = 15.0
#: The memory floor before a start: derived from the profile's gmu (gmu x MemTotal + reserve_gib).
FLOOR_FROM_CONFIG: Final = "auto"
#: Both boxes give memory back slowly after a stop: wait at most 5 min for it.
SETTLE_TIMEOUT_S: Final = 300.0
#: Field note 3 (the host freezes): MemAvailable < 6 GiB for 5 samples 1 s apart, or MemFree < 2 GiB
#: while MemAvailable < 10 GiB.
MEMORY_GUARD: Final[dict[str, Any]] = {
    "enabled": True,
    "mem_available_min_gib": 6,
    "samples": 5,
    "sample_interval_s": 1,
    "memfree_min_gib": 2,
    "memavailable_below_gib": 10,
}
#: Launch deadline: Thor's first start ~6 min, vision warm-up up to 15 min (30 min cap); Spark's
#: field report sets VLLM_ENGINE_READY_TIMEOUT_S=3600. A container found running: 15 min before probing.
DEADLINE_S: Final = {THOR: 1800.0, SPARK: 3600.0}
ADOPT_GRACE_S: Final = 900.0


@dataclass(frozen=True)
class BoxFacts:
    """What the host says about itself (any may be unknown)."""

    model: str | None = None  # /proc/device-tree/model (NUL-terminated there)
    gpus: tuple[str, ...] = ()  # `nvidia-smi --query-gpu=name --format=csv,noheader`
    mem_total_gib: float | None = None  # /proc/meminfo MemTotal


@dataclass(frozen=True)
class Box:
    """The detected kind and the evidence for it (printed by ``init``)."""

    kind: str  # THOR | SPARK | OTHER
    evidence: str
    facts: BoxFacts


def detect_box(facts: BoxFacts) -> Box:
    """Thor from the device tree, Spark from its GB10 GPU (or a device tree naming it), else other."""
    model = (facts.model or "").replace("\x00", "").strip()
    low = model.lower()
    mem = f", MemTotal {facts.mem_total_gib:.2f} GiB" if facts.mem_total_gib is not None else ""
    if "thor" in low:
        return Box(THOR, f"device tree model {model!r}{mem}", facts)
    if "spark" in low or "gb10" in low:
        return Box(SPARK, f"device tree model {model!r}{mem}", facts)
    gb10 = next((g for g in facts.gpus if "gb10" in g.lower() or "thor" in g.lower()), None)
    if gb10 is not None:
        kind = THOR if "thor" in gb10.lower() else SPARK
        return Box(kind, f"GPU {gb10.strip()!r} (nvidia-smi){mem}", facts)
    seen = [f"device tree model {model!r}" if model else "no device tree model"]
    seen.append(f"GPUs {', '.join(facts.gpus)}" if facts.gpus else "no nvidia-smi GPU")
    return Box(OTHER, "; ".join(seen) + mem, facts)


def host_section(box: Box) -> dict[str, Any]:
    """The daemon config's ``host:`` mapping for this box: on a unified-memory box the floor before each
    start follows the profile's gmu (``min_mem_available_gib: auto``: gmu x MemTotal + the reserve)."""
    if box.kind == OTHER:
        return {"drop_caches": False, "memory_guard": {"enabled": False}}
    out: dict[str, Any] = {"drop_caches": True, "drop_caches_level": 1}
    out["reserve_gib"] = RESERVE_GIB
    out["min_mem_available_gib"] = FLOOR_FROM_CONFIG
    out["settle_timeout_s"] = SETTLE_TIMEOUT_S
    out["memory_guard"] = dict(MEMORY_GUARD)
    return out


def startup_section(box: Box) -> dict[str, Any]:
    """The profile's ``startup:`` mapping (empty for an other box: the config's defaults)."""
    if box.kind == OTHER:
        return {}
    return {"deadline_s": DEADLINE_S[box.kind], "adopt_grace_s": ADOPT_GRACE_S}

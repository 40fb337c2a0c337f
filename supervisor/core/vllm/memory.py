"""vLLM's memory-profiling summary ("Actual usage ..."), pure: parse it, compare two starts, pin the pool.

After CUDA-graph capture every GPU worker prints one line (docs/vllm-facts.md "Memory profiling"):

- 0.28-0.32: ``Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB).
  Actual usage is C GiB for consumed memory (weights + non-torch), A GiB for peak activation, and G GiB
  for CUDAGraph memory. Replace ... `--kv-cache-memory=N` (X GiB) to fit into requested memory, ...
  Current kv cache memory in use is K GiB.``
- 0.11-0.2x: ``... Actual usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch
  memory, and G GiB for CUDAGraph memory. ... Current kv cache memory in use is B bytes.``
- a start with ``--kv-cache-memory-bytes`` prints instead ``Initial free memory F GiB, reserved K GiB
  memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.``

The breakdown is kept as ``(part, GiB)`` pairs (:data:`PARTS`), so it is hashable in the machine's state
and a plain mapping in the ledger (key ``usage``). On a unified-memory box the field's bad draw came with
an "Actual usage" 13 GiB larger: :func:`what_grew` names the part that grew against the best draw.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from supervisor.core.host.reserve import GIB as GIB

MIB = 1 << 20

#: The breakdown's parts, in the order vLLM prints them (absent parts are simply missing).
PARTS = (
    "free_at_start",  # "Free memory on device (F/..." (vLLM's view of free memory when it started)
    "total",  # ".../T GiB) on startup"
    "requested",  # "Desired GPU memory utilization is (U, R GiB)"
    "consumed",  # 0.28+: weights + non-torch; older lines: weight + non-torch added up
    "weights",  # older lines only ("for weight")
    "non_torch",  # older lines only ("for non-torch memory"; may be negative on unified memory)
    "activation",  # "for peak activation"
    "cuda_graph",  # "for CUDAGraph memory"
    "kv",  # "Current kv cache memory in use is K GiB" (or B bytes), or the pinned "reserved K GiB"
)
#: The parts that can take memory from the KV pool, with the words alerts use for them.
GROWTH_LABELS = {
    "consumed": "consumed memory (weights + non-torch)",
    "weights": "weights",
    "non_torch": "non-torch memory",
    "activation": "peak activation",
    "cuda_graph": "CUDA graph memory",
}
#: Smaller changes are rounding (vLLM prints 2 decimals).
GROWTH_MIN_GIB = 0.1

Usage = tuple[tuple[str, float], ...]

_NUM = r"(-?[\d.]+)"
_RULES: tuple[tuple[str, re.Pattern[str], float], ...] = (
    ("free_at_start", re.compile(r"Free memory on device(?: \S+)? \(" + _NUM + r"/"), 1.0),
    ("total", re.compile(r"Free memory on device(?: \S+)? \([-\d.]+/" + _NUM + r" GiB\) on startup\."), 1.0),
    ("requested", re.compile(r"Desired GPU memory utilization is \([\d.]+, " + _NUM + r" GiB\)"), 1.0),
    ("consumed", re.compile(_NUM + r" GiB for consumed memory"), 1.0),
    ("weights", re.compile(r"Actual usage is " + _NUM + r" GiB for weight\b"), 1.0),
    ("non_torch", re.compile(_NUM + r" GiB for non-torch memory"), 1.0),
    ("activation", re.compile(_NUM + r" GiB for peak activation"), 1.0),
    ("cuda_graph", re.compile(_NUM + r" GiB for CUDAGraph memory"), 1.0),
    ("kv", re.compile(r"Current kv cache memory in use is " + _NUM + r" GiB"), 1.0),
    ("kv", re.compile(r"Current kv cache memory in use is (\d+) bytes"), 1.0 / GIB),
)
_PINNED = re.compile(
    r"Initial free memory " + _NUM + r" GiB, reserved " + _NUM + r" GiB memory for KV Cache as specified by "
    r"kv_cache_memory_bytes"
)


def parse_usage(message: str) -> Usage | None:
    """The breakdown of one "Actual usage" (or pinned "reserved ... for KV Cache") line, else None."""
    if "Actual usage is" in message:
        found: dict[str, float] = {}
        for part, rx, scale in _RULES:
            m = rx.search(message)
            if m is not None and part not in found:
                value = _float(m.group(1))
                if value is not None:
                    found[part] = round(value * scale, 2)
        if "consumed" not in found and "weights" in found:
            found["consumed"] = round(found["weights"] + found.get("non_torch", 0.0), 2)
        return tuple((p, found[p]) for p in PARTS if p in found) or None
    if "kv_cache_memory_bytes" in message:
        m = _PINNED.search(message)
        if m is not None:
            free, kv = _float(m.group(1)), _float(m.group(2))
            if free is not None and kv is not None:
                return (("free_at_start", free), ("kv", kv))
    return None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def as_usage(value: object) -> Usage:
    """A ledger row's ``usage`` mapping (or anything else) as known ``(part, GiB)`` pairs."""
    if not isinstance(value, Mapping):
        return ()
    out = []
    for part in PARTS:
        v = value.get(part)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out.append((part, float(v)))
    return tuple(out)


def what_grew(now: Usage, best: Usage) -> str | None:
    """The part that took the most memory from the pool against the best draw, as a phrase, else None.

    A part that grew (consumed, activation, CUDA graphs; weights / non-torch on older lines), or vLLM's
    free memory at start-up that shrank (the host held more), whichever moved most, if over 0.1 GiB.
    """
    a, b = dict(now), dict(best)
    moves: list[tuple[float, str]] = []
    for part, label in GROWTH_LABELS.items():
        if part in a and part in b:
            moves.append((a[part] - b[part], f"{label} grew {b[part]:g} -> {a[part]:g} GiB"))
    if "free_at_start" in a and "free_at_start" in b:
        was, is_ = b["free_at_start"], a["free_at_start"]
        moves.append((was - is_, f"free memory at start-up fell {was:g} -> {is_:g} GiB"))
    if not moves:
        return None
    delta, phrase = max(moves, key=lambda m: m[0])
    return f"{phrase} (+{delta:.1f} GiB against the best draw)" if delta >= GROWTH_MIN_GIB else None


def non_kv_gib(usage: Usage) -> float | None:
    """What the server holds besides its KV pool: consumed + peak activation + CUDA graphs (None: unknown)."""
    u = dict(usage)
    if "consumed" not in u:
        return None
    return u["consumed"] + u.get("activation", 0.0) + u.get("cuda_graph", 0.0)


def bytes_per_token(kv_gib: float | None, kv_tokens: int | None) -> float | None:
    """KV bytes per token of a start: its "Available KV cache memory" over its "GPU KV cache size"."""
    if not kv_gib or not kv_tokens or kv_gib <= 0 or kv_tokens <= 0:
        return None
    return kv_gib * GIB / kv_tokens


def usage_text(usage: Usage | Sequence[tuple[str, float]]) -> str:
    """``consumed 19.84 / activation 3.1 / graphs 0.95 GiB`` for the history table (``-`` when unknown)."""
    u = dict(usage)
    short = (("consumed", "consumed"), ("activation", "activation"), ("cuda_graph", "graphs"))
    parts = [f"{name} {u[p]:g}" for p, name in short if p in u]
    return " / ".join(parts) + " GiB" if parts else "-"

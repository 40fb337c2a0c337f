"""Pinning the KV pool, pure: a ``--kv-cache-memory-bytes`` from the best draw, and the command with it.

vLLM (0.11+; 0.32 ``engine/arg_utils.py``) takes ``--kv-cache-memory-bytes N``: the KV cache is then N
bytes per worker, not derived from the memory free at start-up, and ``--gpu-memory-utilization`` is
ignored ("Initial free memory ..., reserved X GiB memory for KV Cache as specified by
kv_cache_memory_bytes config and skipped memory profiling"). ``kv_pool.pin`` uses it against the lottery
(docs/kv-pool.md "Pin"): ``advise`` names the value in the bad-pool alert, ``apply`` also adds it to the
next starts' command (never to the profile file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm.memory import GIB, MIB

#: vLLM's flag that fixes the KV cache size in bytes.
PIN_FLAG = "--kv-cache-memory-bytes"


@dataclass(frozen=True)
class PinAdvice:
    """A ``--kv-cache-memory-bytes`` that pins the pool at the best draw's size (docs/kv-pool.md "Pin")."""

    bytes: int
    best_tokens: int
    bytes_per_token: float
    capped: bool  # lowered to keep the host reserve
    reserve_checked: bool  # False: no memory figures to check the host reserve against

    @property
    def flag(self) -> str:
        return f"{PIN_FLAG} {self.bytes}"

    def text(self, mode: str) -> str:
        """The advice (mode ``advise``) or what was done (``apply``), for the alert and the history."""
        gib = self.bytes / GIB
        why = f"the best draw's {self.best_tokens:,} tokens x {self.bytes_per_token:,.0f} B/token"
        if self.capped:
            why += ", capped to keep the host reserve"
        elif not self.reserve_checked:
            why += "; host reserve not checked (no memory figures)"
        verb = "next starts use" if mode == "apply" else "pin it with"
        return f"{verb} {self.flag} ({gib:.2f} GiB: {why})"


def pin_advice(
    best_tokens: int | None,
    bytes_per_token: float | None,
    current_kv_gib: float | None,
    mem_before_gib: float | None,
    non_kv_gib: float | None,
    reserve_gib: float,
) -> PinAdvice | None:
    """The pin for a bad draw: the best draw's tokens x this config's KV bytes per token, rounded down to
    a MiB, at most what keeps ``reserve_gib`` of the host free (MemAvailable before the start minus what
    the server holds besides its pool, minus the reserve). None when unknown or when it would not be
    bigger than the pool this start already got."""
    if not best_tokens or not bytes_per_token:
        return None
    want = best_tokens * bytes_per_token
    cap = None
    if mem_before_gib is not None and non_kv_gib is not None:
        cap = (mem_before_gib - non_kv_gib - max(0.0, reserve_gib)) * GIB
    pin = want if cap is None else min(want, cap)
    pin_bytes = int(pin // MIB) * MIB
    if pin_bytes <= 0 or (current_kv_gib is not None and pin_bytes <= current_kv_gib * GIB):
        return None
    return PinAdvice(pin_bytes, best_tokens, bytes_per_token, cap is not None and cap < want, cap is not None)


def with_kv_pin(command: Sequence[str], pin_bytes: int | None) -> tuple[str, ...]:
    """``command`` with ``--kv-cache-memory-bytes N`` (an earlier one in either spelling replaced)."""
    out: list[str] = []
    skip = False
    for arg in command:
        if skip:
            skip = False
            continue
        if arg == PIN_FLAG:
            skip = True
            continue
        if arg.startswith(PIN_FLAG + "="):
            continue
        out.append(arg)
    return tuple(out) if pin_bytes is None else (*out, PIN_FLAG, str(pin_bytes))


def pinned_spec(spec: ContainerSpec, pin_bytes: int | None) -> ContainerSpec:
    """The profile's spec with the pin in its command (unchanged without a pin)."""
    if pin_bytes is None:
        return spec
    return replace(spec, command=with_kv_pin(spec.command, pin_bytes))

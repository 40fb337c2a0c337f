"""The sentinel's figures as the ledger, the history and the status document show them. Pure."""

from __future__ import annotations

from typing import Any

from supervisor.core.sentinel.judge import Sample, SentinelRun


def figures(sample: Sample) -> dict[str, Any]:
    """A sample's figures as the ledger, the history and the status show them."""
    return {
        "ttft_ms": sample.ttft_ms,
        "decode_tps": sample.decode_tps,
        "tokens": sample.tokens,
        "mtp_acceptance": list(sample.mtp_acceptance),
        "prefix_hit_rate": sample.prefix_hit_rate,
    }


def status_block(w: SentinelRun) -> dict[str, Any]:
    """One profile's sentinel status: SLOW or not, the last figures, the baseline."""
    base = w.baseline()
    last = figures(w.last) if w.last is not None else {}
    return {
        "slow": w.slow,
        "samples": w.samples,
        "streak": w.streak,
        "slow_since": w.slow_since,
        "baseline_tps": round(base, 2) if base is not None else None,
        "last_at": w.last.at if w.last is not None else None,
        "ttft_ms": last.get("ttft_ms"),
        "decode_tps": last.get("decode_tps"),
        "mtp_acceptance": last.get("mtp_acceptance", []),
        "prefix_hit_rate": last.get("prefix_hit_rate"),
        "backends": list(w.backends),
    }

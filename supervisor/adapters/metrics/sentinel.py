"""The sentinel's gauges on ``/metrics`` (docs/sentinel.md "Metrics"), built from the status document.

Every profile has every gauge from the first scrape, at 0 until its first canary (no series that appears
only after its first event, nothing NaN); the MTP acceptance has one series per draft position the
server reports (none without speculative decoding).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

PREFIX = "vllm_supervisor_sentinel"

#: (suffix, help, status key, scale)
_GAUGES = (
    ("decode_tokens_per_second", "Decode speed of the last canary (tokens/s; 0: none)", "decode_tps", 1.0),
    ("baseline_tokens_per_second", "Decode baseline of this run (tokens/s; 0: none)", "baseline_tps", 1.0),
    ("ttft_seconds", "Time to first token of the last canary (seconds; 0: none)", "ttft_ms", 0.001),
    ("prefix_cache_hit_ratio", "Prefix-cache hits / queries at the last canary", "prefix_hit_rate", 1.0),
    ("slow", "1 while the profile is SLOW (decode below the baseline three times in a row)", "slow", 1.0),
    ("samples", "Canaries measured on the current run", "samples", 1.0),
)  # fmt: skip


def _num(value: object) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def sentinel_gauges(profiles: Iterable[Mapping[str, Any]]) -> Iterable[Metric]:
    """The sentinel gauges of every profile of the status document."""
    families = [
        (GaugeMetricFamily(f"{PREFIX}_{suffix}", text, labels=["profile"]), key, scale)
        for suffix, text, key, scale in _GAUGES
    ]
    mtp = GaugeMetricFamily(
        f"{PREFIX}_mtp_acceptance_ratio",
        "Speculative (MTP) draft tokens accepted per draft, by position, at the last canary",
        labels=["profile", "position"],
    )
    for p in profiles:
        name = str(p.get("name"))
        raw = p.get("sentinel")
        s: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        for family, key, scale in families:
            family.add_metric([name], _num(s.get(key)) * scale)
        for pos, rate in enumerate(s.get("mtp_acceptance") or ()):
            mtp.add_metric([name, str(pos)], _num(rate))
    yield from (f for f, _, _ in families)
    yield mtp

"""vLLM's own counters the sentinel reports with each canary (docs/vllm-facts.md metrics). Pure.

- MTP / speculative decoding acceptance per draft position:
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` / ``vllm:spec_decode_num_drafts_total``
  (empty when the server runs no speculative decoding);
- prefix-cache hit rate: ``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``.

Both since the server started (cumulative counters); None / empty when the server does not export them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from supervisor.core.vllm.metrics import Sample, parse_prometheus

PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
#: At most this many draft positions are reported.
MAX_POSITIONS = 16


@dataclass(frozen=True)
class EngineCounters:
    """The two ratios of one /metrics scrape."""

    mtp_acceptance: tuple[float, ...] = ()
    prefix_hit_rate: float | None = None


def _total(samples: Sequence[Sample]) -> float | None:
    return sum(s.value for s in samples) if samples else None


def counters(series: Mapping[str, list[Sample]]) -> EngineCounters:
    """The ratios from already-parsed series."""
    drafts = _total(series.get(DRAFTS, []))
    per_pos: dict[int, float] = {}
    for s in series.get(PER_POS, []):
        pos = s.labels.get("position", "")
        if pos.isdigit() and int(pos) < MAX_POSITIONS:
            per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + s.value
    mtp: tuple[float, ...] = ()
    if drafts and per_pos:
        mtp = tuple(round(per_pos.get(i, 0.0) / drafts, 4) for i in range(max(per_pos) + 1))
    hits, queries = _total(series.get(HITS, [])), _total(series.get(QUERIES, []))
    rate = round(hits / queries, 4) if hits is not None and queries else None
    return EngineCounters(mtp, rate)


def counters_from_text(text: str) -> EngineCounters:
    """The ratios of one /metrics text."""
    return counters(parse_prometheus(text))

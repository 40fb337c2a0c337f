"""Prometheus text exposition (0.0.4, and the OpenMetrics subset vLLM emits) and a vLLM summary. Pure.

``parse_prometheus`` skips ``# HELP`` / ``# TYPE`` / comment lines, unescapes label values (``\\\\``,
``\\"``, ``\\n``), reads ``NaN`` / ``+Inf`` / ``-Inf`` and ignores an optional trailing timestamp.
Malformed lines are skipped (``strict=True`` raises ``ValueError`` instead).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*\"")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One series value: metric name, its labels, the value."""

    name: str
    labels: dict[str, str]
    value: float


def _parse_labels(s: str, pos: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting just after ``{``; return labels and the index after ``}``."""
    labels: dict[str, str] = {}
    n = len(s)
    while True:
        while pos < n and s[pos] in " \t,":
            pos += 1
        if pos < n and s[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME.match(s, pos)
        if m is None:
            raise ValueError(f"bad label at column {pos}")
        key = m.group(1)
        pos = m.end()
        buf: list[str] = []
        while True:
            if pos >= n:
                raise ValueError("unterminated label value")
            ch = s[pos]
            if ch == "\\" and pos + 1 < n:
                nxt = s[pos + 1]
                buf.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            buf.append(ch)
            pos += 1
        labels[key] = "".join(buf)


def _parse_value(tok: str) -> float:
    low = tok.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    return float(tok)


def parse_line(line: str) -> Sample | None:
    """One exposition line as a Sample; None for blank/comment lines; ValueError if malformed."""
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    m = _NAME.match(s)
    if m is None:
        raise ValueError("line does not start with a metric name")
    name = m.group(0)
    pos = m.end()
    labels: dict[str, str] = {}
    if pos < len(s) and s[pos] == "{":
        labels, pos = _parse_labels(s, pos + 1)
    rest = s[pos:].split()
    if not rest or len(rest) > 2:
        raise ValueError("expected a value and an optional timestamp")
    value = _parse_value(rest[0])
    if len(rest) == 2:
        float(rest[1])  # a timestamp must at least be a number
    return Sample(name, labels, value)


def parse_prometheus(text: str, strict: bool = False) -> dict[str, list[Sample]]:
    """All samples in an exposition text, grouped by series name (``_total``/``_bucket`` names as written)."""
    out: dict[str, list[Sample]] = {}
    for no, line in enumerate(text.splitlines(), 1):
        try:
            sample = parse_line(line)
        except ValueError as exc:
            if strict:
                raise ValueError(f"line {no}: {exc}: {line[:120]!r}") from exc
            continue
        if sample is not None:
            out.setdefault(sample.name, []).append(sample)
    return out


def _sum(samples: Iterable[Sample]) -> float | None:
    vals = [s.value for s in samples]
    return sum(vals) if vals else None


def _label_int(samples: list[Sample], key: str, combine_sum: bool) -> int | None:
    vals: list[int] = []
    for s in samples:
        raw = s.labels.get(key)
        if raw is None or raw in ("None", ""):
            continue
        try:
            vals.append(int(float(raw)))
        except ValueError:
            continue
    if not vals:
        return None
    return sum(vals) if combine_sum else vals[0]


@dataclass(frozen=True)
class VllmMetrics:
    """What the supervisor reads from vLLM's ``/metrics``; each field None when the series is missing.

    Gauges/counters are summed over engines (data parallel); ``kv_cache_usage`` is the highest engine's
    usage (0..1); ``num_gpu_blocks`` and ``kv_cache_size_tokens`` are summed over engines.
    """

    requests_running: float | None
    requests_waiting: float | None
    generation_tokens_total: float | None
    prompt_tokens_total: float | None
    kv_cache_usage: float | None
    num_gpu_blocks: int | None
    block_size: int | None
    kv_cache_size_tokens: int | None
    #: ``vllm:iteration_tokens_total_count``: engine steps that output a token (a prefill chunk that
    #: outputs none is not counted: docs/vllm-facts.md "Forward progress")
    iterations_total: float | None = None
    #: ``vllm:num_preemptions_total``: a step that preempted a request ended (a progress signal too)
    preemptions_total: float | None = None

    @classmethod
    def from_samples(cls, series: dict[str, list[Sample]]) -> VllmMetrics:
        """Summarise already-parsed samples."""
        usage = series.get("vllm:kv_cache_usage_perc") or series.get("vllm:gpu_cache_usage_perc") or []
        info = series.get("vllm:cache_config_info", [])
        return cls(
            requests_running=_sum(series.get("vllm:num_requests_running", [])),
            requests_waiting=_sum(series.get("vllm:num_requests_waiting", [])),
            generation_tokens_total=_sum(series.get("vllm:generation_tokens_total", [])),
            prompt_tokens_total=_sum(series.get("vllm:prompt_tokens_total", [])),
            kv_cache_usage=max((s.value for s in usage), default=None),
            num_gpu_blocks=_label_int(info, "num_gpu_blocks", combine_sum=True),
            block_size=_label_int(info, "block_size", combine_sum=False),
            kv_cache_size_tokens=_label_int(info, "kv_cache_size_tokens", combine_sum=True),
            iterations_total=_sum(series.get("vllm:iteration_tokens_total_count", [])),
            preemptions_total=_sum(series.get("vllm:num_preemptions_total", [])),
        )

    @classmethod
    def from_text(cls, text: str) -> VllmMetrics:
        """Parse a ``/metrics`` body and summarise it."""
        return cls.from_samples(parse_prometheus(text))

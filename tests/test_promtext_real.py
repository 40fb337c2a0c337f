"""promtext on a real vLLM 0.32 /metrics capture, cross-checked against prometheus-client's own parser.

The capture (tests/fixtures/vllm-metrics/vllm-0.32-cpu-tiny.txt) is the body of ``GET /metrics`` of the real
vLLM 0.32 CPU server (tools/realvllm.py, tiny model) after one 8-token completion.
"""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.core.vllm.metrics import VllmMetrics, parse_prometheus
from tests.harness import REPO

CAPTURE = REPO / "tests" / "fixtures" / "vllm-metrics" / "vllm-0.32-cpu-tiny.txt"


def _key(name: str, labels: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_promtext_and_prometheus_client_agree_on_real_vllm() -> None:
    """Every sample of the real capture parses to the same name, labels and value with both parsers."""
    text = CAPTURE.read_text(encoding="utf-8")
    reference = {
        _key(s.name, s.labels): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }
    ours = {
        _key(s.name, s.labels): s.value for ss in parse_prometheus(text, strict=True).values() for s in ss
    }
    assert len(reference) > 400
    assert set(ours) == set(reference)
    for key, value in reference.items():
        assert ours[key] == value or (math.isnan(value) and math.isnan(ours[key])), key


def test_vllm_metrics_summary_of_real_capture() -> None:
    """The supervisor's summary of the real capture: the 8 generated tokens and the KV cache config."""
    m = VllmMetrics.from_text(CAPTURE.read_text(encoding="utf-8"))
    assert (m.requests_running, m.requests_waiting) == (0.0, 0.0)
    assert m.generation_tokens_total == 8.0
    assert m.prompt_tokens_total == pytest.approx(2.0)
    assert (m.num_gpu_blocks, m.block_size, m.kv_cache_size_tokens) == (8192, 128, 1_048_576)


def test_prometheus_client_parser_rejects_a_whole_body_promtext_keeps() -> None:
    """One malformed line makes prometheus-client's parser raise; promtext (lenient) keeps the good lines."""
    text = 'vllm:num_requests_running{engine="0"} 1\nbad{a="x} 1\nvllm:num_requests_waiting{engine="0"} 2\n'
    with pytest.raises(ValueError):  # noqa: PT011 - the parser's message is float()'s
        list(text_string_to_metric_families(text))
    assert sorted(parse_prometheus(text)) == ["vllm:num_requests_running", "vllm:num_requests_waiting"]

"""The real vLLM 0.32 /metrics captures (tests/fixtures/vllm-metrics) read as their README says."""

from __future__ import annotations

from pathlib import Path

from supervisor.core.vllm.metrics import VllmMetrics

DIR = Path(__file__).resolve().parent / "fixtures" / "vllm-metrics"


def read(name: str) -> VllmMetrics:
    return VllmMetrics.from_text((DIR / name).read_text(encoding="utf-8"))


def test_frozen_idle_engine_looks_exactly_idle() -> None:
    """Frozen while idle with 3 hung requests: running, waiting and tokens equal the healthy idle capture."""
    normal, frozen = read("v0.32-cpu-normal-idle.txt"), read("v0.32-cpu-frozen-idle-3-hung.txt")
    assert frozen.requests_running == 0
    assert frozen.requests_waiting == 0
    assert frozen.generation_tokens_total == normal.generation_tokens_total == 16
    assert frozen.prompt_tokens_total == normal.prompt_tokens_total


def test_frozen_mid_batch_keeps_the_last_report() -> None:
    """Frozen mid-batch: the running gauge keeps the 3 requests of the engine's last report."""
    m = read("v0.32-cpu-frozen-mid-batch-3-running.txt")
    assert m.requests_running == 3
    assert m.requests_waiting == 0
    assert m.generation_tokens_total == 68
    assert m.kv_cache_size_tokens is not None

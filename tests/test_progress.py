"""core/vllm/progress.py (pure) and adapters/host/cputime.py (files laid out as the kernel does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.adapters.host.cputime import container_cpu_s
from supervisor.core.vllm.progress import (
    EngineShape,
    Reading,
    add_sample,
    learned_rate,
    longest_step_s,
    moved,
    rate_sample,
)


def test_the_longest_step_is_the_batch_budget_chunked_and_the_whole_prompt_monolithic() -> None:
    assert EngineShape(True, 4096, 262144).longest_step_tokens() == 4096
    assert EngineShape(True, None, 1024).longest_step_tokens() == 1024  # never above the model length
    assert EngineShape(False, 4096, 262144).longest_step_tokens() == 262144
    # Spark without chunking, learned 1,750 tokens/s: 2 x 150 s
    assert longest_step_s(EngineShape(False, None, 262144), 1750.0, 2.0, 120.0) == pytest.approx(299.6, 0.01)
    assert longest_step_s(EngineShape(True, 2048, 16384), 300.0, 2.0, 120.0) == 120.0  # the floor


def test_moved_names_the_counters_that_changed_and_a_busy_cpu() -> None:
    a = Reading(prompt_tokens=100, generation_tokens=5, iterations=3, kv_usage=0.1, cpu_s=10.0)
    assert moved(a, a, 5.0, 0.2) == ()
    b = Reading(prompt_tokens=100, generation_tokens=9, iterations=4, kv_usage=0.1, cpu_s=10.1)
    assert moved(a, b, 5.0, 0.2) == ("generation_tokens", "iterations")  # 0.02 cores: not busy
    c = Reading(prompt_tokens=100, generation_tokens=5, iterations=3, kv_usage=0.2, cpu_s=14.0)
    assert moved(a, c, 5.0, 0.2) == ("kv_usage", "cpu")
    assert moved(a, Reading(), 5.0, 0.2) == ()  # nothing known: nothing moved


def test_rate_samples_and_their_median() -> None:
    assert rate_sample(100, 10) is None  # too small to be a prefill
    assert rate_sample(8192, 24.4) == pytest.approx(335.7, 0.01)
    assert learned_rate((), 100.0) == 100.0
    samples: tuple[float, ...] = ()
    for s in (300.0, 10_000.0, 320.0, 310.0, 1.0):
        samples = add_sample(samples, s)
    assert learned_rate(samples) == 310.0  # outliers do not move a median
    for i in range(40):
        samples = add_sample(samples, float(i))
    assert len(samples) == 15
    assert samples[-1] == 39.0


def test_container_cpu_from_cgroup_v1_and_v2(tmp_path: Path) -> None:
    cid = "ab" * 32
    v1 = tmp_path / "cpuacct" / "docker" / cid
    v1.mkdir(parents=True)
    (v1 / "cpuacct.usage").write_text("2500000000\n")
    assert container_cpu_s(cid, tmp_path) == 2.5
    other = "cd" * 32
    v2 = tmp_path / "system.slice" / f"docker-{other}.scope"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    assert container_cpu_s(other, tmp_path) == 1.5
    assert container_cpu_s("ef" * 32, tmp_path) is None
    assert container_cpu_s("../../etc", tmp_path) is None
    assert container_cpu_s(None, tmp_path) is None

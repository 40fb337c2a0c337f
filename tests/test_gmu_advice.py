"""core/vllm/gmu_advice.py on field report 000's own figures (a Thor: MemTotal 122.86 GiB, 113.85 GiB
available at start, a 15 GiB reserve)."""

from __future__ import annotations

import pytest

from supervisor.core.vllm.diagnosis import diagnose
from supervisor.core.vllm.gmu_advice import MemoryFacts, advise

TOTAL, AVAILABLE, RESERVE = 122.86, 113.85, 15.0


def test_the_offloaded_config_at_088_left_5_gib_and_080_keeps_the_reserve() -> None:
    """0.88: budget 108.12 GiB, the host kept ~5 GiB (NV_ERR_NO_MEMORY); 0.80 kept 15-17 GiB, pool 22.91."""
    a = advise(TOTAL, AVAILABLE, RESERVE, 0.88, weights_gib=74.22, kv_gib=32.73)
    assert a is not None
    assert a.used_gib == pytest.approx(108.12, abs=0.01)
    assert 5.0 <= a.left_gib <= 6.0
    assert a.gmu == 0.80
    assert a.kv_at_gmu_gib == pytest.approx(22.9, abs=0.1)  # the report measured 22.91 GiB at 0.80
    left_at_080 = AVAILABLE - 0.80 * TOTAL
    assert 15.0 <= left_at_080 <= 17.0
    assert "--gpu-memory-utilization 0.80 keeps the 15 GiB host reserve" in a.text()


@pytest.mark.parametrize(("gmu", "kv"), [(0.92, 12.69), (0.89, 8.99)])
def test_the_first_rounds_had_no_gmu_that_keeps_the_reserve(gmu: float, kv: float) -> None:
    """Weights ~97 GiB: 0.92 and 0.89 died, 0.86 lived on ~8 GiB: no gmu keeps 15 GiB and a KV pool."""
    a = advise(TOTAL, AVAILABLE, RESERVE, gmu, weights_gib=97.0, kv_gib=kv)
    assert a is not None
    assert a.gmu is None
    assert a.left_gib < 5.0
    assert "the weights are too big for this box" in a.text()
    lived = AVAILABLE - 0.86 * TOTAL
    assert 7.0 < lived < RESERVE  # 0.86 lived, below the reserve


def test_without_log_figures_the_budget_alone_gives_the_number() -> None:
    a = advise(TOTAL, AVAILABLE, RESERVE, 0.88)
    assert a is not None
    assert a.gmu == 0.80
    assert advise(None, AVAILABLE, RESERVE, 0.88) is None


INFO = "(EngineCore pid=9) INFO 05-01 10:00:00"


def test_a_driver_memory_death_names_the_gmu_in_the_diagnosis() -> None:
    """NV_ERR_NO_MEMORY while loading at 0.88 (the log's weights and pool): the diagnosis names 0.80."""
    log = [
        f"{INFO} [gpu_model_runner.py:1] Model loading took 74.22 GiB and 300 s",
        f"{INFO} [gpu_worker.py:1] Available KV cache memory: 32.73 GiB",
        "(APIServer pid=1) ERROR 05-01 10:06:00 [core.py:1] RuntimeError: Engine core initialization failed. "
        "See root cause above.",
    ]
    kernel = [
        "[  812.1] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)"
    ]
    report = diagnose(log, kernel, memory=MemoryFacts(TOTAL, AVAILABLE, RESERVE, 0.88))
    print(report["diagnosis"])
    assert report["gmu_advice"]["gmu"] == 0.80
    assert "--gpu-memory-utilization 0.80 keeps the 15 GiB host reserve" in report["diagnosis"]
    assert "the host kept ~5.7 GiB" in report["diagnosis"]
    plain = diagnose(log, kernel)
    assert "gmu_advice" not in plain

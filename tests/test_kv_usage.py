"""vLLM's "Actual usage" line, the part that grew, and the KV pin: pure (fixtures, plain values)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from supervisor.core.events import KvBaseline
from supervisor.core.profile_state import KvDraw
from supervisor.core.spec.model import ContainerSpec
from supervisor.core.vllm import kv_pin, kv_pool, memory
from supervisor.sim import simlog

FIXTURES = Path(__file__).parent / "fixtures" / "memory-usage"
GIB = 1 << 30


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text(encoding="utf-8").splitlines()


def test_parses_the_0_32_consumed_shape() -> None:
    """0.28-0.32: consumed (weights + non-torch), activation, graphs, free/total, requested and kv."""
    first, thor = (memory.parse_usage(line) for line in _lines("v0.28-0.32-consumed.log"))
    assert first == (
        ("free_at_start", 91.64),
        ("total", 94.97),
        ("requested", 86.42),
        ("consumed", 64.44),
        ("activation", 4.19),
        ("cuda_graph", 0.25),
        ("kv", 17.79),
    )
    assert dict(thor or ())["kv"] == 65.77
    assert memory.non_kv_gib(thor or ()) == pytest.approx(19.84 + 3.1 + 0.95)


def test_parses_the_older_weight_shape_and_bytes() -> None:
    """0.11-0.2x: weight and non-torch apart (consumed is their sum), kv in bytes."""
    (line,) = _lines("v0.11-0.2x-weight.log")
    u = dict(memory.parse_usage(line) or ())
    assert (u["weights"], u["non_torch"], u["consumed"]) == (8.8, 0.02, 8.82)
    assert (u["activation"], u["cuda_graph"]) == (1.4, 0.68)
    assert u["kv"] == round(9232221491 / GIB, 2)


def test_parses_the_pinned_line_and_ignores_others() -> None:
    """With --kv-cache-memory-bytes vLLM says what it reserved; other lines are not a breakdown."""
    (line,) = _lines("v0.32-pinned.log")
    assert memory.parse_usage(line) == (("free_at_start", 110.2), ("kv", 65.66))
    assert memory.parse_usage("INFO [gpu_worker.py:298] Available KV cache memory: 65.77 GiB") is None
    assert memory.parse_usage("Actual usage is unknown") is None


@pytest.mark.parametrize("flavor", ["v0_11", "v0_32"])
def test_the_simulator_prints_a_line_of_the_real_shape(flavor: str) -> None:
    """The simulator's line parses to the figures it was made from (the weight form on 0.11)."""
    f = simlog.LogFormat(simlog.FLAVORS[flavor], 1, 2)
    ((_, line),) = simlog.usage_lines(f, 65.77, 15.27)
    u = dict(memory.parse_usage(line) or ())
    assert u["consumed"] == round(15.27 + simlog.NON_TORCH_GIB, 2)
    assert (u["activation"], u["cuda_graph"], u["kv"]) == (3.1, 0.95, 65.77)
    assert ("weights" in u) is (flavor == "v0_11")


def test_what_grew_names_the_part_that_took_the_pool() -> None:
    """The field's bad draw: "Actual usage" 13 GiB larger; the biggest move is named, small ones are not."""
    best = (("free_at_start", 112.4), ("consumed", 19.84), ("activation", 3.1), ("cuda_graph", 0.95))
    bad = (("free_at_start", 112.1), ("consumed", 32.84), ("activation", 3.2), ("cuda_graph", 0.95))
    assert memory.what_grew(bad, best) == (
        "consumed memory (weights + non-torch) grew 19.84 -> 32.84 GiB (+13.0 GiB against the best draw)"
    )
    fell = (("free_at_start", 99.0), ("consumed", 19.84), ("activation", 3.1), ("cuda_graph", 0.95))
    assert memory.what_grew(fell, best) == (
        "free memory at start-up fell 112.4 -> 99 GiB (+13.4 GiB against the best draw)"
    )
    assert memory.what_grew(best, best) is None
    assert memory.what_grew(bad, ()) is None


def test_pin_is_the_best_draw_at_this_configs_bytes_per_token() -> None:
    """best tokens x (KV GiB / tokens), rounded down to a MiB; unknown or not bigger: no advice."""
    per_token = memory.bytes_per_token(36.7, 557_599)
    assert per_token == pytest.approx(36.7 * GIB / 557_599)
    a = kv_pin.pin_advice(1_013_816, per_token, 36.7, None, None, 15.0)
    assert a is not None
    assert a.bytes == int(1_013_816 * (per_token or 0) // (1 << 20)) * (1 << 20)
    assert (a.capped, a.reserve_checked) == (False, False)
    assert a.flag == f"--kv-cache-memory-bytes {a.bytes}"
    assert "host reserve not checked" in a.text("advise")
    assert kv_pin.pin_advice(None, per_token, 36.7, None, None, 15.0) is None
    assert kv_pin.pin_advice(557_599, per_token, 36.7, None, None, 15.0) is None  # would not help


def test_pin_keeps_the_host_reserve() -> None:
    """MemAvailable before 100 GiB, the server's non-KV 20 GiB, reserve 15: at most 65 GiB of KV."""
    per_token = 65 * GIB / 1_000_000
    a = kv_pin.pin_advice(1_200_000, per_token, 40.0, 100.0, 20.0, 15.0)
    assert a is not None
    assert a.bytes == 65 * GIB
    assert (a.capped, a.reserve_checked) == (True, True)
    assert "capped to keep the host reserve" in a.text("apply")
    assert a.text("apply").startswith("next starts use --kv-cache-memory-bytes")
    roomy = kv_pin.pin_advice(900_000, per_token, 40.0, 100.0, 20.0, 15.0)
    assert roomy is not None
    assert not roomy.capped
    assert kv_pin.pin_advice(1_200_000, per_token, 70.0, 100.0, 20.0, 15.0) is None  # 65 < 70 now


def test_pinned_spec_adds_the_flag_once() -> None:
    """The pin is appended to the command, replacing an earlier pin in either spelling."""
    spec = ContainerSpec(name="x", image="i", command=("--model", "m", "--kv-cache-memory-bytes=5"))
    assert kv_pin.pinned_spec(spec, 7 * GIB).command == (
        "--model",
        "m",
        "--kv-cache-memory-bytes",
        str(7 * GIB),
    )
    assert kv_pin.pinned_spec(spec, None) is spec
    assert kv_pin.with_kv_pin(("a", "--kv-cache-memory-bytes", "9", "b"), 3) == (
        "a",
        "b",
        "--kv-cache-memory-bytes",
        "3",
    )


def test_ledger_keeps_the_breakdown_and_the_best_draw_row() -> None:
    """``usage`` is a plain mapping in the row; best_draw returns the row of the baseline."""
    row = kv_pool.ledger_fields(
        fingerprint="fp", gmu=0.73, image_id=None, kv_gib=65.77, model_gib=15.27, usage=(("consumed", 19.84),)
    )
    assert row["usage"] == {"consumed": 19.84}
    rows = [
        {
            "outcome": "ready",
            "kv_tokens": 1_013_816,
            "fingerprint": "fp",
            "container_id": "a",
            "usage": {"kv": 65.0},
        },
        {"outcome": "ready", "kv_tokens": 557_599, "fingerprint": "fp", "container_id": "b"},
        {"outcome": "ready", "kv_tokens": 557_599, "fingerprint": "fp", "container_id": "c"},
    ]
    best = kv_pool.best_draw(rows, "fp", exclude="c")
    assert best is not None
    assert best["container_id"] == "a"
    assert memory.as_usage(best.get("usage")) == (("kv", 65.0),)
    assert kv_pool.best_draw(rows, "other") is None


def test_the_baseline_of_a_start_is_read_from_the_ledger_in_core() -> None:
    """kv_pool.baseline_of: the best earlier draw of the config, the draws newest first and that draw's
    breakdown and KV GiB, as the machine's KvBaseline (the daemon only reads the rows)."""
    rows = [
        {
            "outcome": "ready",
            "kv_tokens": 1_013_816,
            "fingerprint": "fp",
            "container_id": "a",
            "kv_gib": 65.77,
            "usage": {"kv": 65.0},
        },
        {"outcome": "failed_oom", "kv_tokens": 9, "fingerprint": "fp", "container_id": "x"},
        {
            "outcome": "redrawn",
            "kv_tokens": 557_599,
            "fingerprint": "fp",
            "container_id": "b",
            "kv_gib": True,
        },
        {"outcome": "ready", "kv_tokens": 557_599, "fingerprint": "fp", "container_id": "c"},
    ]
    got = kv_pool.baseline_of(rows, "fp", exclude="c")
    assert got == KvBaseline(1_013_816, "fp", (557_599, 1_013_816), (("kv", 65.0),), 65.77)
    assert kv_pool.baseline_of(rows, "other") == KvBaseline(None, "other", (), (), None)


def test_one_judgement_names_the_part_that_grew_and_the_pin() -> None:
    """kv_pool.judge of a bad draw: the verdict, the bad starts before it, what grew against the best draw
    and, with pin advise, the --kv-cache-memory-bytes of the best draw; a good draw: no judgement."""
    draw = KvDraw(
        tokens=557_599,
        gib=26.3,
        usage=(("consumed", 40.0), ("kv", 26.3)),
        fingerprint="fp",
        baseline_tokens=1_013_816,
        baseline_for="fp",
        recent=(557_599, 1_013_816),
        best_usage=(("consumed", 19.84), ("kv", 47.8)),
        best_gib=47.8,
    )

    def judge(d: KvDraw, pin_mode: str) -> kv_pool.KvJudgement | None:
        return kv_pool.judge(
            d,
            warn_below_tokens=None,
            warn_drop_pct=20.0,
            pin_mode=pin_mode,
            mem_available_gib=120.0,
            reserve_gib=8.0,
        )

    found = judge(draw, "advise")
    assert found is not None
    assert found.verdict.event == "kv_pool.lottery"
    assert found.bad_before == 1
    assert found.grew is not None
    assert "consumed" in found.grew
    assert found.pin is not None
    assert found.message.startswith(found.verdict.message)
    assert kv_pin.PIN_FLAG in found.message
    quiet = judge(draw, "off")
    assert quiet is not None
    assert quiet.pin is None
    assert judge(replace(draw, tokens=1_013_816), "advise") is None

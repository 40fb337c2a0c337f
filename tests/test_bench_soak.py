"""bench.soak's own judgement of an emergency: a spinning engine's stop is expected, not false, as long as
the daemon's longest-step bound for the soak's engine allows (the 2-hour soak of 6426c34 gave it 600 s
where the bound was 655 s, and counted every spin's stop as a false emergency). Plain values."""

from __future__ import annotations

from bench import soak
from supervisor.core.settings.profile import ProbeConfig
from supervisor.core.vllm.progress import DEFAULT_PREFILL_RATE, EngineShape, longest_step_s


def test_the_spin_window_outlasts_the_daemons_bound_and_its_failed_rounds() -> None:
    probes = ProbeConfig()
    chunked = "--no-enable-chunked-prefill" not in soak.SOAK_ARGS
    shape = EngineShape(chunked, None, soak.MAX_MODEL_LEN)
    bound = longest_step_s(shape, DEFAULT_PREFILL_RATE, probes.step_factor, probes.freeze_after_s)
    assert bound > 600  # the old window: what this test exists for
    assert soak.EXPECTED_EMERGENCY_S["spin"] >= bound + probes.failure_threshold * probes.interval_s
    assert soak.EXPECTED_EMERGENCY_S["die"] == 60.0


def test_rescore_moves_a_spins_late_stop_to_its_spin_and_keeps_a_false_one() -> None:
    wall0 = 1_000_000.0
    report = {
        "faults": [(450.0, "soak-a", "spin"), (540.0, "soak-b", "forged_line"), (900.0, "soak-b", "die")],
        "false_emergencies": 3,
        "false_kernel_kills": 0,
        "spins_stopped": 0,
        "false_emergency_events": [
            {
                "ts": wall0 + 450 + 667,
                "profile": "soak-a",
                "fields": {"reason": "longer than the longest step"},
            },
            {"ts": wall0 + 450 + 667, "profile": "soak-b", "fields": {}},  # another profile: still false
            {"ts": wall0 + 900 + 61, "profile": "soak-b", "fields": {}},  # after the die window: still false
        ],
    }
    again = soak.rescore(report, wall0)
    assert again["false_emergencies"] == 2
    assert [e["profile"] for e in again["false_emergency_events"]] == ["soak-b", "soak-b"]
    assert again["spins_stopped"] == 1
    assert again["as_run"]["false_emergencies"] == 3

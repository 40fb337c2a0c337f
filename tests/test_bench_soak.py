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

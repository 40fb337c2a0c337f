"""bench.soak's own judgement of an emergency: a spinning engine's stop is expected, not false, as long as
the daemon's longest-step bound for the soak's engine allows (the 2-hour soak of 6426c34 gave it 600 s
where the bound was 655 s, and counted every spin's stop as a false emergency). Plain values."""

from __future__ import annotations

from bench import soak
from supervisor.core.settings.profile import ProbeConfig
from supervisor.core.vllm.progress import (
    DEFAULT_PREFILL_RATE,
    STEP_STRETCH_MAX,
    EngineShape,
    longest_step_s,
)


def test_the_spin_window_outlasts_the_daemons_bound_and_its_failed_rounds() -> None:
    probes = ProbeConfig()
    chunked = "--no-enable-chunked-prefill" not in soak.SOAK_ARGS
    shape = EngineShape(chunked, None, soak.MAX_MODEL_LEN)
    bound = longest_step_s(shape, DEFAULT_PREFILL_RATE, probes.step_factor, probes.freeze_after_s)
    assert bound > 600  # the old window: what this test exists for
    # a spin burning under half a core is judged at STEP_STRETCH_MAX x the bound at the latest (the soak of
    # 517782a, its spins at ~0.4 of a core, saw them stopped 810-978 s in, past the bound's 655 s)
    latest = STEP_STRETCH_MAX * bound + probes.failure_threshold * probes.interval_s
    assert soak.EXPECTED_EMERGENCY_S["spin"] >= latest
    assert soak.EXPECTED_EMERGENCY_S["spin"] >= 978 + 10
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


def test_a_fault_answers_one_emergency_at_most() -> None:
    """A spin's window is wide (twice the bound): once its stop came, a later emergency of the same profile in
    that window is false, and a rescore does not give a stop the run already counted a second one."""
    spin = (1000.0, "soak-a", "spin")
    die = (1500.0, "soak-a", "die")
    events = [
        {"ts": 1900.0, "profile": "soak-a"},  # the spin's stop, 900 s in
        {"ts": 1520.0, "profile": "soak-a"},  # the die's
        {"ts": 2100.0, "profile": "soak-a"},  # in the spin's window, but the spin was answered: false
        {"ts": 1950.0, "profile": "soak-b"},  # another profile: false
    ]
    judged = {float(e["ts"]): f for e, f in soak.answered([spin, die], events)}
    assert judged == {1520.0: die, 1900.0: spin, 1950.0: None, 2100.0: None}
    wall0 = 0.0
    report = {
        "faults": [spin, die],
        "false_emergencies": 1,
        "spins_stopped": 1,
        "spins_stopped_at": [1000.0],
        "false_emergency_events": [{"ts": 2100.0, "profile": "soak-a", "fields": {}}],
    }
    again = soak.rescore(report, wall0)
    assert (again["false_emergencies"], again["spins_stopped"]) == (1, 1)


def test_every_kind_is_injected_while_spins_hold_their_profile() -> None:
    """A spin keeps its profile out for ~7 slots (its ~11-minute bound at one slot per 90 s); the other
    kinds still come in turn on the other profile, the field's healthy-boot lines among them (the soak of
    6426c34 wrote none of those in 48 faults)."""
    busy_until = {"soak-a": -1, "soak-b": -1}
    injected: list[tuple[str, str]] = []
    for slot in range(80):
        ready = [(p, slot > busy_until[p]) for p in ("soak-a", "soak-b")]
        chosen = soak.pick_fault(slot, len(injected), ready)
        if chosen is None:
            continue
        injected.append(chosen)
        if chosen[1] == "spin":
            busy_until[chosen[0]] = slot + 7
    kinds = [k for _p, k in injected]
    assert {k: kinds.count(k) for k in soak.FAULT_KINDS} == {
        k: len(kinds) // 7 + (i < len(kinds) % 7) for i, k in enumerate(soak.FAULT_KINDS)
    }
    assert len(injected) == 80  # a slot always finds a ready profile here: one spins at a time
    assert soak.pick_fault(3, 0, [("soak-a", False), ("soak-b", False)]) is None

"""The sentinel's pure judgement (core/sentinel): due times, baseline, decay streak, restart limit,
backends."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from supervisor.core.sentinel import judge
from supervisor.core.sentinel.counters import counters_from_text
from supervisor.core.sentinel.judge import Sample, SentinelPolicy, SentinelRun
from supervisor.core.vllm.backends import backend_line, backend_lines

POLICY = SentinelPolicy(warmup_s=300, interval_s=900, decay_pct=30, baseline_s=3600)


def sample(at: float, tps: float) -> Sample:
    return Sample(at=at, ttft_ms=50.0, decode_tps=tps, tokens=64)


def run(
    watch: SentinelRun, speeds: list[float], policy: SentinelPolicy = POLICY, t0: float = 1000.0
) -> tuple[SentinelRun, list[judge.Verdict]]:
    verdicts = []
    for i, tps in enumerate(speeds):
        at = t0 + i * policy.interval_s
        watch, v = judge.observe(watch, sample(at, tps), at, policy)
        verdicts.append(v)
    return watch, verdicts


def test_due_after_warmup_then_every_interval() -> None:
    w = judge.fresh(SentinelRun(), "c1", "fp", ready_at=100.0)
    assert not judge.due(w, 399.0, POLICY)
    assert judge.due(w, 400.0, POLICY)
    w = judge.scheduled(w, 400.0, POLICY)
    assert not judge.due(w, 1299.0, POLICY)
    assert judge.due(w, 1300.0, POLICY)
    assert judge.due(judge.busy(w, 1300.0, 30.0), 1330.0, POLICY)
    assert not judge.due(judge.busy(w, 1300.0, 30.0), 1329.0, POLICY)


def test_no_watch_is_never_due() -> None:
    assert not judge.due(SentinelRun(), 1e9, POLICY)


def test_baseline_is_median_of_history_and_first_hour() -> None:
    w = replace(judge.fresh(SentinelRun(), "c1", "fp", 0.0), history=(30.0, 34.0))
    w, verdicts = run(w, [33.0], t0=400.0)
    assert verdicts[0].baseline == 32.0  # median of the history alone
    assert w.baseline() == 33.0  # the first-hour sample joined it


def test_three_slow_samples_make_slow_once_then_recovered() -> None:
    w = judge.fresh(SentinelRun(), "c1", "fp", 0.0)
    w, verdicts = run(w, [33.2, 33.0, 12.1, 12.0])
    assert [v.slow_sample for v in verdicts] == [False, False, True, True]
    assert not w.slow
    assert w.streak == 2
    w, more = run(w, [12.2, 12.0], t0=5000.0)
    assert [v.flip for v in more] == ["slow", None]
    assert w.slow
    assert w.slow_since == 1000.0 + 2 * 900
    assert not any(v.restart for v in verdicts + more)  # on_decay alert: no restart
    w, back = run(w, [33.0], t0=9000.0)
    assert back[0].flip == "recovered"
    assert not w.slow
    assert w.streak == 0


def test_slow_samples_do_not_join_the_baseline() -> None:
    w = judge.fresh(SentinelRun(), "c1", "fp", 0.0)
    w, _ = run(w, [30.0, 10.0, 10.0, 10.0, 10.0])
    assert w.run == (30.0,)
    assert w.baseline() == 30.0


def test_samples_after_the_first_hour_do_not_join_the_baseline() -> None:
    w = judge.fresh(SentinelRun(), "c1", "fp", 0.0)
    w, _ = run(w, [30.0] * 6, t0=0.0)  # at 0, 900, ..., 4500: five within the hour
    assert len(w.run) == 5


def test_just_above_threshold_is_not_slow() -> None:
    w = replace(judge.fresh(SentinelRun(), "c1", "fp", -1e5), history=(100.0,))  # past its first hour
    _, verdicts = run(w, [70.0, 69.9])
    assert [v.slow_sample for v in verdicts] == [False, True]


def test_restart_policy_restarts_once_per_interval() -> None:
    policy = replace(POLICY, on_decay="restart", min_restart_interval_s=21600)
    w = replace(judge.fresh(SentinelRun(), "c1", "fp", 0.0), history=(30.0,))
    w, verdicts = run(w, [10.0, 10.0, 10.0], policy)
    assert [v.restart for v in verdicts] == [False, False, True]
    assert w.last_restart_at == 1000.0 + 2 * 900
    # the restart's new run: slow again soon after, within the rate limit -> no second restart
    w2 = replace(judge.fresh(w, "c2", "fp", 4000.0), history=(30.0,))
    assert w2.last_restart_at == w.last_restart_at
    w2, again = run(w2, [10.0, 10.0, 10.0, 10.0], policy, t0=5000.0)
    assert not any(v.restart for v in again)
    assert w2.slow
    assert w2.restart_due
    # once the interval has passed, the next slow sample of the same streak restarts
    late = w.last_restart_at + 21600
    w2, v = judge.observe(w2, sample(late, 10.0), late, policy)
    assert v.restart
    assert w2.last_restart_at == late


def test_message_names_speed_baseline_drop_and_duration() -> None:
    v = judge.Verdict(baseline=33.2, slow_sample=True)
    s = sample(1000.0 + 45 * 60, 12.1)
    assert v.message(s, 1000.0) == "decode 12.1 tok/s, baseline 33.2 (-64 %) for 45 min"


def test_backend_change() -> None:
    assert judge.backend_change([("Using FLASH_ATTN backend",)], ("Using FLASH_ATTN backend",)) == ()
    assert judge.backend_change([("Using FLASH_ATTN backend",)], ("Using TRITON_ATTN backend",)) == (
        "+ Using TRITON_ATTN backend",
        "- Using FLASH_ATTN backend",
    )
    assert judge.backend_change([()], ("Using TRITON_ATTN backend",)) == ()  # nothing known before
    assert judge.backend_change([("Using FLASH_ATTN backend",)], ()) == ()  # this start logged none


def test_backend_lines_from_real_log_forms() -> None:
    lines = [
        "(EngineCore pid=25) INFO 12-01 20:04:53 [cuda.py:446] Using FLASH_ATTN backend.",
        "INFO 12-01 20:04:54 [__init__.py:923] Using MarlinLinearKernel for CompressedTensorsWNA16",
        "(EngineCore pid=25) INFO 12-01 20:04:53 [cuda.py:446] Using FLASH_ATTN backend.",
        "INFO 12-01 20:04:55 [gpu_model_runner.py:1] Using sleep-mode backend: cumem",
        "INFO 12-01 20:04:55 [api_server.py:1] Using supplied chat template",
        "INFO 12-01 20:04:55 [cuda.py:547] Using backend TORCH_SDPA for vit attention",
    ]
    assert backend_lines(lines) == (
        "Using FLASH_ATTN backend",
        "Using MarlinLinearKernel for CompressedTensorsWNA16",
        "Using backend TORCH_SDPA for vit attention",
    )
    assert backend_line("INFO 12-01 20:04:55 [x.py:1] Using Triton MLA backend on V1 engine.") == (
        "Using Triton MLA backend on V1 engine"
    )


def test_counters_mtp_per_position_and_prefix_hit_rate() -> None:
    text = "\n".join(
        [
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 80.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50.0',
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 30.0',
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 120.0',
        ]
    )
    c = counters_from_text(text)
    assert c.mtp_acceptance == (0.8, 0.5)
    assert c.prefix_hit_rate == 0.25
    none = counters_from_text('vllm:prefix_cache_queries_total{engine="0"} 0.0')
    assert none.mtp_acceptance == ()
    assert none.prefix_hit_rate is None


def test_sentinel_gauges_present_at_zero_before_any_canary() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from supervisor.adapters.metrics.sentinel import sentinel_gauges

    class _C:
        def __init__(self, profiles: list[dict[str, object]]) -> None:
            self.profiles = profiles

        def collect(self):  # type: ignore[no-untyped-def]
            return sentinel_gauges(self.profiles)

    reg = CollectorRegistry()
    reg.register(_C([{"name": "p", "sentinel": {"slow": False, "samples": 0}}]))
    text = generate_latest(reg).decode()
    assert 'vllm_supervisor_sentinel_decode_tokens_per_second{profile="p"} 0.0' in text
    assert 'vllm_supervisor_sentinel_slow{profile="p"} 0.0' in text
    assert "NaN" not in text
    reg2 = CollectorRegistry()
    doc: dict[str, object] = {
        "name": "p",
        "sentinel": {"slow": True, "decode_tps": 12.5, "mtp_acceptance": [0.8, 0.4]},
    }
    reg2.register(_C([doc]))
    text = generate_latest(reg2).decode()
    assert 'vllm_supervisor_sentinel_slow{profile="p"} 1.0' in text
    assert 'vllm_supervisor_sentinel_decode_tokens_per_second{profile="p"} 12.5' in text
    assert 'vllm_supervisor_sentinel_mtp_acceptance_ratio{position="1",profile="p"} 0.4' in text


def test_digest_line_carries_the_canaries_of_the_last_day() -> None:
    from supervisor.core.fleet.digest import perf_line

    now = 100_000.0
    rows = [
        {"ts": now - 90_000, "decode_tps": 99.0, "ttft_ms": 10.0},  # older than 24 h: left out
        {"ts": now - 600, "decode_tps": 30.0, "ttft_ms": 100.0},
        {"ts": now - 300, "decode_tps": 34.0, "ttft_ms": 120.0},
        {"ts": now - 100, "decode_tps": 12.0, "ttft_ms": 300.0, "slow": True},
    ]
    assert perf_line(rows, now) == "30.0 tok/s (12.0-34.0, n 3, 1 slow), TTFT 120 ms"
    assert perf_line([], now) == "no canary"


def test_sentinel_config_defaults_and_errors_name_file_and_key(tmp_path: Path) -> None:
    from supervisor.config import check_config, load_profile
    from supervisor.config.sentinel import SentinelConfig
    from tests.test_config import MINIMAL, profile

    assert load_profile(profile(tmp_path, MINIMAL)).sentinel == SentinelConfig()
    d = SentinelConfig()
    assert (d.enabled, d.warmup_s, d.interval_s, d.decay_pct) == (True, 300.0, 900.0, 30.0)
    assert (d.on_decay, d.min_restart_interval_s) == ("alert", 21600.0)
    ok = load_profile(
        profile(tmp_path, MINIMAL + "sentinel:\n  on_decay: restart\n  interval_s: 60\n", "q.yaml")
    )
    assert ok.sentinel.on_decay == "restart"
    assert ok.sentinel.policy().interval_s == 60.0
    bad = profile(
        tmp_path, MINIMAL + "sentinel:\n  on_decay: reboot\n  decay_pct: 0\n  intervl_s: 5\n", "b.yaml"
    )
    problems = "\n".join(str(p) for p in check_config(bad))
    assert "b.yaml" in problems
    assert "sentinel.on_decay" in problems
    assert "reboot" in problems
    assert "sentinel.decay_pct" in problems
    assert "sentinel.intervl_s" in problems


def test_the_restart_rate_limit_survives_a_daemon_restart(tmp_path: Path) -> None:
    """The sample that decided a restart is marked in the perf ledger; a new daemon reads the last one back
    (the run's first canary round reads it, core/fleet/sentinel.py seeds the run with it), so a slow server
    right after a daemon restart does not get a second restart inside min_restart_interval_s."""
    from supervisor.adapters.store.state import Store
    from supervisor.core.clock import FakeClock

    clock = FakeClock(start=1000.0)
    store = Store(tmp_path / "state", clock)
    policy = replace(POLICY, on_decay="restart", min_restart_interval_s=21600)
    w = replace(judge.fresh(SentinelRun(), "c1", "fp", 0.0), history=(30.0,))
    for tps in (10.0, 10.0, 10.0):
        clock.advance(900.0)
        w, v = judge.observe(w, sample(clock.now(), tps), clock.now(), policy)
        store.append_perf({"profile": "p", "decode_tps": tps, "restart": v.restart})
    assert w.last_restart_at == clock.now()
    assert judge.last_restart(store.read_perf("p", n=2000)) == clock.now()
    # the daemon restarts: a fresh watch seeded from the ledger, slow again an hour later
    seeded = SentinelRun(last_restart_at=judge.last_restart(store.read_perf("p")))
    again = replace(judge.fresh(seeded, "c2", "fp", clock.now()), history=(30.0,))
    again, verdicts = run(again, [10.0, 10.0, 10.0], policy, t0=clock.now() + 3600)
    assert not any(v.restart for v in verdicts)
    assert judge.last_restart([{"ts": 5.0, "restart": False}, {"ts": 7.0}]) is None

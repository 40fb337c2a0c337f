"""The proof on the real vLLM 0.32 CPU server, shipped probe defaults (5 s rounds, freeze 15 s, canary 10 s):
a long monolithic prefill (a 10,000-token prompt to the bigger random model of tools/big_model.py, 49 s on
this box with a soak running, 3x the 15 s freeze bound) completes with no emergency; then the EngineCore
frozen with two generations running is acted on and the profile is RUNNING again in a new container
(recovery after an emergency on the real server), and the frozen API server is acted on (generous bound
45 s; the figures are bench/bench_detection.py's).

The third freeze shape, the EngineCore frozen while idle, is proven on the real server by
tests/test_daemon_real_vllm.py (tiny model): there the daemon's own canary is the request, counted nowhere
(a user's request to a frozen idle engine is counted nowhere too, so the daemon sees the same);
bench/bench_detection.py times all three shapes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.detect_real import api_server_stop, engine_stop_busy, prefill_trial
from bench.detect_trials import ACT_EVENTS, first_event, wait_running
from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, big_monolithic_spec, write_daemon_config, write_profile
from tests.harness import wait_for
from tools.realvllm import ensure_cached

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

PROMPT_TOKENS = 10_000


def test_long_prefill_is_never_killed_and_the_busy_and_api_freezes_are_acted_on(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    venv, _tiny = real_vllm_paths
    big = ensure_cached()
    spec = big_monolithic_spec("big", resources.name("big"), base_image, venv, big)
    profile = write_profile(tmp_path, spec, resources.test_id)
    config = write_daemon_config(
        tmp_path, [profile], backoff_initial_s=0.5, backoff_max_s=1.0, breaker_limit=10
    )
    d = DaemonProc(config, tmp_path)
    base = f"http://127.0.0.1:{spec.port}"
    key = tmp_path / "big.key"
    try:
        d.start()
        cid = wait_running(d, "big", None, 600)
        start = time.monotonic()
        t = prefill_trial(d, "big", base, key, "monolithic", PROMPT_TOKENS)
        took = time.monotonic() - start
        print(f"{PROMPT_TOKENS}-token monolithic prefill answered after {took:.1f} s: {t.as_dict()}")
        assert t.outcome.get("status") == 200, t.as_dict()
        assert t.emergencies == 0, t.as_dict()
        assert t.failed_rounds == 0, t.as_dict()
        assert d.status("big")["container_id"] == cid

        for shape, inject in (
            ("busy", engine_stop_busy(resources.client, base, key)),
            ("api", api_server_stop(resources.client)),
        ):
            inj = inject(d, "big", cid)
            try:
                ev = wait_for(
                    lambda: first_event(d, "big", inj.at, ACT_EVENTS, lambda e: True),  # noqa: B023
                    75,  # the detection figures and their bound: bench/detect_real.py
                    interval=0.2,
                    message=f"{shape}: the emergency stop",
                )
            finally:
                if inj.undo is not None:
                    inj.undo()
            acted = float(ev["ts"]) - inj.at
            print(f"freeze shape {shape}: {ev['name']} after {acted:.1f} s")
            if shape == "busy":  # RUNNING again after the emergency (not waited for after the last shape)
                cid = wait_running(d, "big", cid, 600)
    finally:
        d.close()

"""The daemon and the REAL vLLM 0.32 (CPU build, tiny model): starts that fail, with their diagnoses.

- Docker's default 64 MB ``/dev/shm``: the real engine refuses to initialise (``Insufficient space in
  /dev/shm``, fixture 050); the start is diagnosed ``shm`` with both remedies, and a retry stays allowed.
- An engine that dies on its first request: the fault overlay's ``die`` trigger (tools/overlays/faults,
  tests/real_faults.py) armed before the start, so the engine core SIGKILLs itself in the first step it
  runs: the daemon's first generation. vLLM answers it 500 and exits 0 (docs/vllm-facts.md "Engine faults
  by overlay"); the start must be a failure diagnosed as the engine's death on its first request (never a
  shutdown on request), and the breaker (limit 1) ends the retries. (This was the tiny model's own worker
  crash on a 2-token first completion, fixture 055, until it stopped reproducing on 2026-12-05.)

(The third failed start, a refused ``--max-model-len``, is in tests/test_daemon_real_vllm_keys.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Resources
from tests.daemon_harness import real_vllm_spec, start_daemon
from tests.harness import wait_for
from tests.real_faults import arm, disarm, faults_spec, trigger_dir

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]


def test_real_vllm_default_dev_shm_is_diagnosed_shm_with_the_remedy(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    venv, model = real_vllm_paths
    spec = real_vllm_spec("real", resources.name("real"), base_image, venv, model)
    spec.extra_container = {**spec.extra_container, "shm_size": "64m"}
    # a long backoff: the one start is what is judged; the retry it schedules is not waited for
    d = start_daemon(
        tmp_path, spec, resources.test_id, breaker_limit=5, backoff_initial_s=600.0, backoff_max_s=600.0
    )
    try:

        def diagnosed() -> dict[str, Any] | None:
            return next((e for e in d.events("real") if e["name"] == "start.diagnosed"), None)

        ev = wait_for(diagnosed, 300, message="the failed start diagnosed")["fields"]
        print("real vLLM with a 64 MB /dev/shm:", ev)
        assert ev["outcome"] == "failed_shm"
        assert ev["cause"] == "shm"
        assert "vLLM needs 160 MiB and 64 MiB are free" in ev["diagnosis"]
        assert "--shm-size" in ev["diagnosis"]
        assert "--ipc host" in ev["diagnosis"]
        # not a configuration error: a retry may follow a fix, so the breaker is not opened at once
        st = d.wait_state("real", "BACKOFF", 30)
        assert st["breaker"]["state"] == "closed"
    finally:
        d.close()


def test_real_vllm_engine_that_dies_on_its_first_request_is_a_diagnosed_failure(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    venv, model = real_vllm_paths
    triggers = trigger_dir(tmp_path)
    arm(triggers, "die")  # the first step the engine runs kills it: the daemon's first generation's
    spec = faults_spec("real", resources.name("real"), base_image, venv, model, triggers)
    # breaker limit 1: one real load is enough to judge the diagnosis (the breaker itself is proven on the
    # simulator); the start must end FATAL, not RUNNING, not looping
    d = start_daemon(
        tmp_path, spec, resources.test_id, breaker_limit=1, backoff_initial_s=1.0, backoff_max_s=1.0
    )
    try:
        st = d.wait_state("real", "FATAL", 300)
        assert st["breaker"]["state"] == "open"

        def row() -> list[dict[str, Any]] | None:
            rows = list(d.call("history", name="real", n=10)["data"]["starts"])
            return rows or None

        starts = wait_for(row, 60, message="the start in the ledger")
        for s in starts:
            print("start:", {k: s[k] for k in ("outcome", "cause", "load_s", "diagnosis")})
            assert s["outcome"] == "engine_dead"
            assert "died on its first request" in s["diagnosis"]
            assert "shut down" not in s["diagnosis"]
        names = d.event_names("real")
        assert names.count("container.started") == 1  # breaker limit 1: no second start
        assert "start.ready" not in names  # never RUNNING: the first generation never succeeded
        assert "engine.dead" in names
    finally:
        d.close()
        disarm(triggers, "die")

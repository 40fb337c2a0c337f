"""The daemon and the REAL vLLM 0.32 (CPU build, tiny model): an engine killed while serving by a request is
told in the chat with its cause.

The overlay is the real ``vllm/v1/worker/cpu_worker.py`` with an ``execute_model`` that raises when a step
schedules a request with ``seed`` 31337 (a "poison" request, as seed 002's ``min_tokens`` request that needed
a compiler the image lacks). The test sends that request to the serving engine: the engine dies, the daemon
restarts it, and the chat (a real HTTP receiver on 127.0.0.1 as a generic webhook) gets a critical alert
that quotes the exception line and the overlay's file and function; ``history`` keeps the line per death.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import Resources
from tests.daemon_harness import real_vllm_spec, start_daemon
from tests.harness import wait_for, webhook_receiver
from tests.real_faults import worker_overlay

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]

ANCHOR = "class CPUWorker(Worker):\n"
POISON = "poison request: seed 31337 kills the engine"
STEP = (
    "    def execute_model(self, scheduler_output):\n"
    "        for _r in scheduler_output.scheduled_new_reqs:\n"
    "            if _r.sampling_params is not None and _r.sampling_params.seed == 31337:\n"
    f"                raise RuntimeError({POISON!r})\n"
    "        return super().execute_model(scheduler_output)\n\n"
)


def test_real_vllm_an_engine_killed_by_a_request_is_alerted_with_its_exception_line(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    venv, model = real_vllm_paths
    spec = real_vllm_spec("real", resources.name("real"), base_image, venv, model)
    mounts = [*spec.extra_container["mounts"], worker_overlay(tmp_path, venv, ANCHOR, STEP)]
    spec.extra_container = {**spec.extra_container, "mounts": mounts}
    with webhook_receiver() as recv:
        d = start_daemon(
            tmp_path,
            spec,
            resources.test_id,
            breaker_limit=3,
            backoff_initial_s=1.0,
            backoff_max_s=1.0,
            extra={"alerts": {"channels": [{"kind": "generic", "name": "chat", "url": f"{recv.url}/hook"}]}},
        )
        try:
            st = d.wait_state("real", "RUNNING", 300)
            key = (tmp_path / "real.key").read_text(encoding="utf-8").strip()
            body = {"model": "tiny", "prompt": "hello there", "max_tokens": 4, "seed": 31337}
            url = f"http://127.0.0.1:{spec.port}/v1/completions"
            try:
                code = requests.post(
                    url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60
                ).status_code
            except requests.ConnectionError:
                code = None  # the server went away mid-request: the engine died
            assert code is None or code >= 500, code  # never a 401: the poison request reached the engine

            def cause_alert() -> dict[str, Any] | None:
                bodies = [q.json() for q in recv.received()]
                return next((b for b in bodies if b.get("kind") == "engine.death_cause"), None)

            alert = wait_for(cause_alert, 120, message="the engine.death_cause alert")
            print("alert:", alert["severity"], alert["title"], "|", alert["reason"])
            assert alert["severity"] == "critical"
            assert f"RuntimeError: {POISON}" in alert["reason"]
            assert "cpu_worker.py" in alert["reason"]
            assert "in execute_model" in alert["reason"]
            kinds = [b.get("kind") for b in (q.json() for q in recv.received())]
            print("alerts in order:", kinds)
            rows = list(d.call("history", name="real", n=10)["data"]["starts"])
            died = [r for r in rows if r.get("root_cause")]
            print("history:", [{k: r.get(k) for k in ("outcome", "root_cause")} for r in rows])
            assert died
            assert died[-1]["root_cause"] == f"RuntimeError: {POISON}"
            assert st["container_id"]
        finally:
            d.close()

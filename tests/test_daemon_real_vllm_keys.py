"""The daemon and the REAL vLLM 0.32 (CPU build, tiny model): a key on the command line, a refused config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from supervisor.adapters.secrets import new_key
from tests.conftest import Resources
from tests.daemon_harness import ProfileSpec, real_vllm_spec, start_daemon
from tests.harness import wait_for
from tools.realvllm import server_argv

pytestmark = [pytest.mark.docker, pytest.mark.real_vllm, pytest.mark.slow]


def _spec(
    resources: Resources, base_image: str, venv: Path, model: Path, args: list[str], **kw: Any
) -> ProfileSpec:
    return real_vllm_spec("real", resources.name("real"), base_image, venv, model, args=args, **kw)


def test_real_vllm_with_api_key_on_the_command_line_runs_enforced(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    """`--api-key K` in the command, no api_key section: RUNNING, auth enforced, the probes send K."""
    venv, model = real_vllm_paths
    key = new_key()  # never begins with "-" (vLLM would refuse it: docs/vllm-facts.md)
    spec = _spec(resources, base_image, venv, model, [*server_argv(venv), "--api-key", key], api_key=False)
    d = start_daemon(tmp_path, spec, resources.test_id)
    try:
        # the unkeyed request of the auth check is a job of its own: it may land after RUNNING
        st = d.wait_state("real", "RUNNING", 420, auth="enforced")
        assert st["last_probe"]["ok"] is True
        base = f"http://127.0.0.1:{spec.port}"
        assert requests.get(base + "/v1/models", timeout=10).status_code == 401
        ok = requests.get(base + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert ok.status_code == 200
        # (that the probes sent the key is the RUNNING wait and last_probe.ok above: a 401 on the first
        # generation would have opened the breaker; a negative-only check of a failure event here could not
        # fail, docs/testing.md "Tests that can fail")
        assert key not in d.log_tail(100_000)
    finally:
        d.close()


def test_real_vllm_refused_max_model_len_is_fatal_after_one_start(
    tmp_path: Path, resources: Resources, base_image: str, real_vllm_paths: tuple[Path, Path]
) -> None:
    """`--max-model-len 100000` on the tiny model (1,024 positions): failed_config, FATAL after one start."""
    venv, model = real_vllm_paths
    spec = _spec(resources, base_image, venv, model, server_argv(venv, max_model_len=100000))
    d = start_daemon(tmp_path, spec, resources.test_id, breaker_limit=5, backoff_initial_s=1.0)
    try:
        st = d.wait_state("real", "FATAL", 300)
        assert st["breaker"]["state"] == "open"
        starts = wait_for(lambda: d.call("history", name="real", n=10)["data"]["starts"], 30, message="row")
        assert [s["outcome"] for s in starts] in (
            ["failed_config"],
            ["failed_exit"],
        )  # the exit may come first
        print(
            f"real vLLM refused config: ledger outcome {starts[0]['outcome']} (failed_exit: exit came first)"
        )
        assert starts[0]["cause"] == "config"
        diagnosis = starts[0]["diagnosis"]
        assert "User-specified max_model_len (100000) is greater than the derived max_model_len" in diagnosis
        assert "fix the profile, then `supervisorctl reset`" in diagnosis
        assert [e["name"] for e in d.events("real")].count("container.started") == 1
    finally:
        d.close()

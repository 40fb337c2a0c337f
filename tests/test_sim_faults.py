"""The simulator prints what the real vLLM 0.32 printed for the same faults (tests/fixtures/vllm-logs/05x).

Each fault is real where it can be: the simulator's container really has Docker's 64 MB /dev/shm, or a
model directory without a config; the analyzer classifies the simulator's log as it does the real one's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.core.vllm.diagnosis import diagnose
from supervisor.sim.launch import sim_run_kwargs
from supervisor.sim.vllm_sim import ArgumentError, parse_argv
from tests.conftest import Resources
from tests.harness import free_port, wait_for

pytestmark = [pytest.mark.docker]
LOGS = Path(__file__).parent / "fixtures" / "vllm-logs"
FAST = {"VSIM_LOAD_SECONDS": "1", "VSIM_FLAVOR": "v0_32"}


def _run(
    client: docker.DockerClient,
    resources: Resources,
    env: dict[str, str],
    args: list[str],
    exit_code: int = 1,
    **kw: Any,
) -> str:
    """Run the simulator until it exits (a failed start); its log as the daemon reads it (Docker's merge).

    Docker keeps the order of each stream, not the order between them: on a loaded box a banner line
    (stdout) written just before the refusal's traceback (stderr) was stored after it in 13 of 40 runs,
    and the analyzer then took it for a second boot (outcome ``starting``) until it learnt that a late start
    line is the same boot's (tests/test_logparse_analyzer.py). Nothing is re-read: Docker marks a container
    exited only after its log copier has finished (or given up after 10 s), so the log is complete then.
    """
    run = sim_run_kwargs(
        resources.name("fault"), free_port(), resources.labels, env={**FAST, **env}, args=args
    )
    c = client.containers.run(**{**run, **kw})

    def exited() -> bool:
        c.reload()
        return bool(c.status == "exited")

    wait_for(exited, 30, 0.2, "simulator exits on the fault")
    assert c.attrs["State"]["ExitCode"] == exit_code  # as the real server: 1 (2 for argparse's refusal)
    return str(c.logs(stdout=True, stderr=True).decode("utf-8", "replace"))


def _report(log: str) -> dict[str, Any]:
    a = LogAnalyzer()
    for line in log.splitlines():
        a.feed(line)
    return a.report()


def _real(name: str) -> dict[str, Any]:
    return _report("\n".join((LOGS / name).read_text(encoding="utf-8").splitlines()[2:]))


def test_docker_default_dev_shm_fails_like_the_real_server(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str
) -> None:
    """64 MB /dev/shm (no shm_size, no ipc host) and an engine needing 160 MiB: failed_shm, same numbers."""
    log = _run(docker_client, resources, {"VSIM_SHM_REQUIRED_MIB": "160"}, ["--model", "/models/sim"])
    sim, real = _report(log), _real("050-v0.32-cpu-shm-64m-insufficient-dev-shm.log")
    for key in ("outcome", "cause", "shm_required_mib", "shm_free_mib"):
        assert sim[key] == real[key], key
    assert "--shm-size" in diagnose(log.splitlines(), [])["diagnosis"]


def test_a_big_enough_dev_shm_starts(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str
) -> None:
    """The same engine with shm_size 1g reaches ready (the check reads the real /dev/shm)."""
    run = sim_run_kwargs(
        resources.name("shm"), free_port(), resources.labels, env={**FAST, "VSIM_SHM_REQUIRED_MIB": "160"}
    )
    c = docker_client.containers.run(**{**run, "shm_size": "1g"})
    wait_for(lambda: b"Application startup complete" in c.logs(), 30, 0.2, "ready with a 1g /dev/shm")


def test_a_too_long_max_model_len_is_refused_like_the_real_server(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str
) -> None:
    """--max-model-len 100000 on 1,024 positions: failed_config with vLLM's own sentence."""
    log = _run(
        docker_client,
        resources,
        {"VSIM_MAX_POSITIONS": "1024"},
        ["--model", "/models/tiny", "--max-model-len", "100000"],
    )
    sim, real = _report(log), _real("051-v0.32-cpu-max-model-len-above-derived.log")
    for key in ("outcome", "cause", "config_class", "config_error"):
        assert sim[key] == real[key], key


def test_a_model_directory_without_config_is_refused_like_the_real_server(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str
) -> None:
    """--model an empty directory: failed_config "Invalid repository ID or local directory specified"."""
    log = _run(docker_client, resources, {"VSIM_CHECK_MODEL_DIR": "1"}, ["--model", "/models/tiny"])
    sim, real = _report(log), _real("052-v0.32-cpu-empty-model-directory.log")
    for key in ("outcome", "cause", "config_class", "config_error"):
        assert sim[key] == real[key], key


@pytest.mark.parametrize(
    ("keys", "fixture"),
    [
        (
            ["sk-fixture-first-key-0001", "-fixtureSecondKey0002"],
            "053-v0.32-cpu-argparse-key-value-starting-with-dash.log",
        ),
        (["-fixtureOnlyKey0003"], "054-v0.32-cpu-argparse-api-key-expects-a-value.log"),
    ],
    ids=["second-key", "only-key"],
)
def test_a_key_that_begins_with_a_dash_is_refused_like_the_real_server(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str, keys: list[str], fixture: str
) -> None:
    """``--api-key K -K2`` / ``--api-key -K``: argparse's refusal, exit 2, the real one's report."""
    args = ["--model", "/models/tiny", "--served-model-name", "tiny", "--api-key", *keys, "--port", "8000"]
    log = _run(docker_client, resources, {}, args, exit_code=2)
    sim, real = _report(log), _real(fixture)
    for key in ("outcome", "cause", "config_error"):
        assert sim[key] == real[key], key
    assert log.splitlines()[-1] == (LOGS / fixture).read_text(encoding="utf-8").splitlines()[-1]


def test_a_dash_o_key_is_vllms_o_option_and_a_dash_k_key_is_refused() -> None:
    """Seen on the real 0.32 (docs/vllm-facts.md "A key that begins with '-'"): ``--api-key K -OKEY`` starts,
    with ``'optimization_level': 'KEY'`` in `non-default args`; ``-KKEY`` is an unrecognized argument."""
    known, given = parse_argv(["--model", "/m", "--api-key", "k1", "-OsomeKeyValue0003", "--port", "8000"])
    assert given["optimization_level"] == "someKeyValue0003"
    assert known["--api-key"] == ["k1"]
    with pytest.raises(ArgumentError, match="unrecognized arguments: -KsomeKey"):
        parse_argv(["--model", "/m", "--api-key", "k1", "-KsomeKey"])


def test_an_engine_that_dies_on_its_first_request_dies_like_the_real_server(
    docker_client: docker.DockerClient, resources: Resources, sim_image: str
) -> None:
    """VSIM_SCENARIO=die_on_first_request: the first generation is answered 500 with the real 0.32 body,
    the log reads as the real one's (the worker's death, no request served, one 500), and vLLM exits 0."""
    port = free_port()
    run = sim_run_kwargs(
        resources.name("first"),
        port,
        resources.labels,
        env={**FAST, "VSIM_SCENARIO": "die_on_first_request"},
        args=["--model", "/models/sim", "--served-model-name", "sim-model"],
    )
    c = docker_client.containers.run(**run)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: b"Application startup complete" in c.logs(), 30, 0.2, "the simulator ready")
    body = {"model": "sim-model", "prompt": "hello", "max_tokens": 4}
    answer = requests.post(base + "/v1/completions", json=body, timeout=10)
    assert answer.status_code == 500
    assert answer.json()["error"]["message"] == real_dead_message()

    def exited() -> bool:
        c.reload()
        return bool(c.status == "exited")

    wait_for(exited, 30, 0.2, "the simulator exits after its engine died")
    assert c.attrs["State"]["ExitCode"] == 0  # as the real server's
    log = str(c.logs(stdout=True, stderr=True).decode("utf-8", "replace"))
    sim, real = _report(log), _real("055-v0.32-cpu-worker-died-on-first-request.log")
    for key in ("outcome", "engine_dead_detail", "http_500_count", "requests_served", "last_exception"):
        assert sim[key] == real[key], key
    assert (
        diagnose(log.splitlines(), [])["diagnosis"]
        == diagnose(
            (LOGS / "055-v0.32-cpu-worker-died-on-first-request.log")
            .read_text(encoding="utf-8")
            .splitlines()[2:],
            [],
        )["diagnosis"]
    )


def real_dead_message() -> str:
    """The message of the real 0.32's HTTP 500 once its engine died (seen 2026-12-03, fixture 055)."""
    return "EngineCore encountered an issue. See stack trace (above) for the root cause."

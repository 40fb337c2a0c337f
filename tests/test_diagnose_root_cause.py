"""Diagnoses that name the root cause, on the real vLLM 0.32 logs recorded here (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.adapters.kernel_log.record import KernelLogEvent
from supervisor.core.host.attribution import PidLookup
from supervisor.core.vllm.analyzer import LogAnalyzer
from supervisor.core.vllm.diagnosis import diagnose
from supervisor.core.vllm.failures import exception_line
from supervisor.daemon.sources.kernel_log import start_lines

LOGS = Path(__file__).parent / "fixtures" / "vllm-logs"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()[2:]


def test_a_64m_dev_shm_names_the_remedy() -> None:
    """Docker's default /dev/shm: the shm class with both remedies, never 'still starting' or 'generic'."""
    text = diagnose(_lines("050-v0.32-cpu-shm-64m-insufficient-dev-shm.log"), [])["diagnosis"]
    assert "160 MiB" in text
    assert "64 MiB" in text
    assert "shm_size" in text
    assert "--shm-size" in text
    assert "--ipc host" in text


@pytest.mark.parametrize(
    ("name", "quoted", "fix"),
    [
        (
            "051-v0.32-cpu-max-model-len-above-derived.log",
            "User-specified max_model_len (100000) is greater than the derived max_model_len",
            "lower --max-model-len",
        ),
        (
            "052-v0.32-cpu-empty-model-directory.log",
            "Invalid repository ID or local directory specified: '/models/tiny'",
            "point --model at a directory",
        ),
    ],
)
def test_a_configuration_error_quotes_vllm_and_says_reset(name: str, quoted: str, fix: str) -> None:
    """vLLM refused its arguments: its own reason quoted, the fix, and the reset (no 'still starting')."""
    report = diagnose(_lines(name), [])
    text = report["diagnosis"]
    assert report["vllm"]["outcome"] == "failed_config"
    assert quoted in text
    assert fix in text
    assert "fix the profile, then `supervisorctl reset`" in text
    assert "still starting" not in text


def _generic_failure(exception: str) -> list[str]:
    """An EngineCore failure no specific rule knows, as vLLM 0.32 prints it (raw traceback dump)."""
    return [
        "(EngineCore pid=25) ERROR 12-01 20:04:54 [core.py:1510] EngineCore failed to start.",
        "(EngineCore pid=25) ERROR 12-01 20:04:54 [core.py:1510] Traceback (most recent call last):",
        '(EngineCore pid=25) ERROR 12-01 20:04:54 [core.py:1510]   File "/x/vllm/v1/engine/core.py", line 1',
        f"(EngineCore pid=25) ERROR 12-01 20:04:54 [core.py:1510] {exception}",
        "Process EngineCore:",
        "Traceback (most recent call last):",
        '  File "/x/vllm/v1/engine/core.py", line 1482, in run_engine_core',
        exception,
        "Traceback (most recent call last):",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
        "{'EngineCore': 1}",
    ]


@pytest.mark.parametrize(
    "exception",
    [
        "AssertionError: QSA ring capacity 12 < 16 requested",
        "KeyError: 110",
        "AttributeError: 'FusedMoE' object has no attribute 'w2_weight_scale_inv'",
    ],
)
def test_a_generic_failure_quotes_the_last_exception_line(exception: str) -> None:
    """The field's real causes would all read 'generic': the sentence quotes the EngineCore's exception."""
    report = diagnose(_generic_failure(exception), [])
    assert report["vllm"]["outcome"] == "failed_engine_init"
    assert report["vllm"]["last_exception"] == exception
    assert f"`{exception}`" in report["diagnosis"]


def test_wrappers_and_stops_are_not_root_causes() -> None:
    """vLLM's 'see above' wrappers and a SIGTERM's KeyboardInterrupt are never quoted as the cause."""
    assert exception_line("RuntimeError: Engine core initialization failed. See root cause above.") is None
    assert exception_line("Exception: WorkerProc initialization failed due to an exception") is None
    assert exception_line("KeyboardInterrupt: terminated") is None
    assert exception_line("INFO: 127.0.0.1 - GET /health") is None
    assert (
        exception_line("torch.OutOfMemoryError: CUDA out of memory.")
        == "torch.OutOfMemoryError: CUDA out of memory."
    )


def test_a_request_validation_error_is_not_a_configuration_error() -> None:
    """Only vLLM's *Config classes make a configuration error (a request's validation error does not)."""
    a = LogAnalyzer()
    a.feed("pydantic_core._pydantic_core.ValidationError: 1 validation error for ChatCompletionRequest")
    assert a.outcome() != "failed_config"


def test_an_argument_vllm_cannot_parse_is_a_configuration_error() -> None:
    """vLLM 0.32's argparse refusal (checked here: `--max-model-len abc`) is failed_config, quoted."""
    report = diagnose(
        [
            "usage: api_server.py [-h] [--headless] [--api-server-count API_SERVER_COUNT]",
            "api_server.py: error: argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'",
        ],
        [],
    )
    assert report["vllm"]["outcome"] == "failed_config"
    assert "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'" in report["diagnosis"]


def test_a_configuration_error_outranks_old_kernel_errors() -> None:
    """vLLM's refusal is certain: an earlier Xid in the kernel log is a note, not the headline."""
    kernel = ["[ 100.000000] NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=python, GPU has fallen off the bus."]
    text = diagnose(_lines("051-v0.32-cpu-max-model-len-above-derived.log"), kernel)["diagnosis"]
    assert text.startswith("vLLM refused its configuration")
    assert "note: the kernel log holds earlier errors" in text


def test_a_worker_that_died_on_the_first_request_is_named_with_when() -> None:
    """Real 0.32 (fixture 055): the worker vanished on the first forward. The diagnosis names the process
    and that no request was served before it, not the API server's EngineDeadError wrapper or the
    EngineCore's consequential ``RuntimeError: cancelled``."""
    report = diagnose(_lines("055-v0.32-cpu-worker-died-on-first-request.log"), [])
    text = report["diagnosis"]
    assert report["vllm"]["outcome"] == "engine_dead"
    assert "on its first request" in text
    assert "VllmWorker-0 died unexpectedly" in text
    assert "diagnose --kernel" in text
    assert "See stack trace (above)" not in text
    assert "cancelled" not in text
    assert "shut down" not in text


def test_the_wrapper_of_a_dead_engine_is_not_its_root_cause() -> None:
    """0.32's EngineDeadError says only "see above": never quoted as the cause."""
    line = (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
        "for the root cause."
    )
    assert exception_line(line) is None


def test_an_excerpt_without_its_start_does_not_claim_the_first_request() -> None:
    """A log seen only from the middle (fixture 015, a posted excerpt) may have lost the requests served
    before the 500s: 'after startup', never 'on its first request'."""
    report = diagnose(_lines("015-enginedead-docker-compose-500s.log"), [])
    assert report["vllm"]["requests_served"] is None
    assert "on its first request" not in report["diagnosis"]
    assert "after startup" in report["diagnosis"]


def _oom(pid: int, lookup: PidLookup) -> KernelLogEvent:
    line = f"Out of memory: Killed process {pid} (python3) total-vm:1024kB, anon-rss:512kB, file-rss:0kB"
    return KernelLogEvent(
        kind="oom_kill", xid=None, pci=None, pid=pid, proc_name="python3", seq=7, usec=5_000_000,
        ts=1_700_000_000.0, line=line, raw=f"3,7,5000000,-;{line}", lookup=lookup,
    )  # fmt: skip


def test_a_failed_start_is_not_blamed_on_another_process_oom_kill() -> None:
    """The real 64 MB /dev/shm refusal with a host job's python3 OOM-killed beside it (seen in a test run,
    2026-12-03): the follower's lookup says the pid lives outside the container, so the start's kernel
    lines leave it out and the diagnosis names /dev/shm. The same line naming a process in the start's
    container stays, and is the cause."""
    log = _lines("050-v0.32-cpu-shm-64m-insufficient-dev-shm.log")
    cid = "ab" * 32
    theirs = _oom(4242, PidLookup(True, None))
    ours = _oom(4243, PidLookup(True, cid))
    # unfiltered, the line outranks the shm refusal (what the daemon said before 2026-12-03)
    assert diagnose(log, [theirs.raw])["diagnosis"].startswith("The Linux OOM killer killed python3")
    assert start_lines([theirs], cid) == []
    assert "shared memory is too small" in diagnose(log, start_lines([theirs], cid))["diagnosis"]
    assert start_lines([theirs, ours], cid) == [ours.raw]
    assert start_lines([theirs], None) == [theirs.raw]  # no container known: nothing left out
    reaped = _oom(4244, PidLookup(False, None))  # reaped, no cgroup seen: a vLLM name may be ours
    assert start_lines([reaped], cid) == [reaped.raw]


ERR = "(EngineCore pid=25) ERROR 12-01 20:04:54 [multiproc_executor.py:1]"


def test_the_workers_own_line_outranks_the_wrapper_that_repeats_it() -> None:
    """vLLM 0.32 re-raises a worker's exception as 'Worker failed with error ..., please check the stack trace
    above for the root cause': the worker's line and frame above it are the root cause; the wrapper alone
    (the worker's traceback not in the log) is still quoted."""
    own = "ValueError: NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration"
    wrapper = (
        f"RuntimeError: Worker failed with error '{own[12:]}', please check the stack trace above for the "
        "root cause"
    )
    lines = [
        f"{ERR} Traceback (most recent call last):",
        f'{ERR}   File "/v/vllm/v1/worker/cpu_worker.py", line 205, in determine_available_memory',
        f"{ERR} {own}",
        "Traceback (most recent call last):",
        '  File "/v/vllm/v1/executor/multiproc_executor.py", line 400, in collective_rpc',
        wrapper,
    ]
    report = diagnose(lines, [])["vllm"]
    assert report["last_exception"] == own
    assert (
        report["last_exception_where"] == "/v/vllm/v1/worker/cpu_worker.py:205 in determine_available_memory"
    )
    assert diagnose(lines[-2:], [])["vllm"]["last_exception"] == wrapper

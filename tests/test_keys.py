"""Keys wherever vLLM takes them, and failures retrying cannot mend (pure: plain values, a fake clock)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.config import ApiKeySource
from supervisor.core.actions import Alert, StopContainer
from supervisor.core.alerts.view import render_text
from supervisor.core.breaker import Breaker
from supervisor.core.events import (
    ContainerExited,
    FirstGeneration,
    LogReady,
    LogStartupFailure,
    StartDiagnosed,
)
from supervisor.core.machine.diagnosed import DIAGNOSIS_WAIT_S
from supervisor.core.spec.model import ContainerSpec, EnvVar
from supervisor.core.states import State
from supervisor.core.vllm.diagnosis import diagnose
from supervisor.core.vllm.server_keys import env_of, key_expected, server_keys
from supervisor.core.vocab import Outcome
from supervisor.daemon.executor.livekey import spec_key
from tests.test_catalog import message
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy

SERVE = ["vllm", "serve", "/models/m", "--port", "8000"]


@pytest.mark.parametrize(
    ("extra", "env", "want"),
    [
        (["--api-key", "k1"], {}, ("k1",)),
        (["--api-key", "k1", "k2"], {}, ("k1", "k2")),  # several values: any of them is accepted
        (["--api-key", "k1", "--api-key", "k2"], {}, ("k2",)),  # argparse: the last occurrence wins
        (["--api-key=k3"], {}, ("k3",)),
        (["--api-key", "k1", "--api-key=k3"], {}, ("k3",)),
        (["--api-key", "k1"], {"VLLM_API_KEY": "env"}, ("k1",)),  # the command line wins (0.8+)
        ([], {"VLLM_API_KEY": "env"}, ("env",)),
        ([], {"VLLM_API_KEY": ""}, ()),  # empty: no key, the server is open
        (["--api-key", ""], {"VLLM_API_KEY": "env"}, ("env",)),  # vLLM drops empty keys
        ([], {}, ()),
    ],
)
def test_server_keys_follow_vllm(extra: list[str], env: dict[str, str], want: tuple[str, ...]) -> None:
    """The keys a vLLM 0.32 server accepts for a command line and environment (docs/vllm-facts.md §6)."""
    assert server_keys([*SERVE, *extra], env) == want


def test_env_lines_split_at_the_first_equals() -> None:
    assert env_of(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}


def _starting() -> Driver:
    d = Driver(policy=policy(probes={"interval_s": 60.0, "failure_threshold": 5}, breaker={"limit": 3}))
    fresh_boot(d)
    d.to_starting()
    return d


def test_a_401_on_the_first_generation_is_unauthorized_and_opens_the_breaker_at_once() -> None:
    """HTTP 401: no retries, outcome failed_unauthorized, FATAL after one start, the fix in the alert."""
    d = _starting()
    d.send(LogReady())
    d.send(OK_HEALTH)
    acts = d.send(FirstGeneration(ok=False, latency_ms=None, error="HTTP 401"))
    assert any(isinstance(a, StopContainer) for a in acts)  # no retry of a 401
    assert "start.first_generation_retry" not in d.emits()
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    assert d.st() == State.FATAL
    assert [r.outcome for r in d.records()] == [Outcome.FAILED_UNAUTHORIZED]
    alert = next(a for a in d.alerts() if a.kind == "breaker.config_error")
    assert alert.severity == "critical"
    assert alert.await_diagnosis  # the daemon adds the diagnosis (test below) before sending
    card = message("breaker.config_error")
    assert "fix the profile, then `supervisorctl reset qwen`" in render_text(card, "en")
    assert "supervisorctl reset qwen" in render_text(card, "zh")
    assert d.s.breaker.count(d.now) == 1


def test_a_configuration_error_goes_fatal_after_one_start() -> None:
    """vLLM refused its arguments (the log's failed_config): FATAL at once, no backoff, one breaker record."""
    d = _starting()
    d.send(LogStartupFailure(outcome=Outcome.FAILED_CONFIG, detail="ValidationError: max_model_len"))
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.st() == State.FATAL
    assert "backoff.scheduled" not in d.emits()
    assert [a.kind for a in d.alerts() if isinstance(a, Alert) and a.severity == "critical"] == [
        "breaker.config_error"
    ]


def test_a_transient_failure_still_backs_off() -> None:
    """An OOM start is not a configuration error: BACKOFF, the breaker stays closed."""
    d = _starting()
    d.send(LogStartupFailure(outcome="failed_oom", detail="CUDA out of memory"))
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.st() == State.BACKOFF


def test_breaker_trip_latches_at_once() -> None:
    """trip() records the failure and opens; reset() closes it again."""
    b = Breaker(limit=3, window_s=60.0).trip(100.0)
    assert b.is_open(100.0)
    assert b.count(100.0) == 1
    assert not b.reset().is_open(100.0)


def test_a_401_start_is_diagnosed_as_a_missing_key_never_as_a_shutdown() -> None:
    """The log of a server the supervisor stopped after a 401 reads 'shut down'; the diagnosis says why."""
    lines = [
        "INFO 12-01 10:00:00 [api_server.py:1] Application startup complete.",
        "INFO 12-01 10:00:09 [launcher.py:1] Shutting down FastAPI HTTP server.",
    ]
    plain = diagnose(lines, [])
    report = diagnose(lines, [], Outcome.FAILED_UNAUTHORIZED)
    assert "shut down" not in report["diagnosis"]
    assert "wants a key the supervisor does not have" in report["diagnosis"]
    assert report["cause"] == "unauthorized"
    assert "cause" not in plain


def test_a_configuration_error_the_exit_outran_opens_the_breaker_when_diagnosed() -> None:
    """Exit handled before the refusal line (failed_exit, BACKOFF): the diagnosis (cause config) -> FATAL."""
    d = _starting()
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.st() == State.BACKOFF
    d.send(StartDiagnosed("failed_exit", "config", "vLLM refused its configuration (...)"))
    assert d.st() == State.FATAL
    assert d.s.breaker.count(d.now) == 1  # one start, one failure: latched, not counted twice
    alert = d.alerts()[-1]
    assert (alert.kind, alert.diagnosis) == ("breaker.config_error", "vLLM refused its configuration (...)")


def test_a_late_diagnosis_of_another_cause_changes_nothing() -> None:
    """A non-config diagnosis in BACKOFF only updates last_diagnosis (the retry stays scheduled)."""
    d = _starting()
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.send(StartDiagnosed("failed_exit", "engine_init", "x"))
    assert d.st() == State.BACKOFF
    assert d.s.last_diagnosis == "x"


def test_the_retry_after_a_failed_start_waits_for_its_diagnosis() -> None:
    """The backoff (1 s) is over before the diagnosis comes: no new start until it does, so a configuration
    error the exit outran burns one start only, however slow the diagnosis job on a loaded box."""
    d = _starting()
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.st() == State.BACKOFF
    held = d.advance(20.0)
    assert d.st() == State.BACKOFF
    assert "backoff.retry" not in d.emits(held)
    d.send(StartDiagnosed("failed_exit", "config", "vLLM refused its configuration (...)"))
    assert d.st() == State.FATAL
    assert d.s.breaker.count(d.now) == 1


def test_a_diagnosis_of_another_cause_releases_the_held_retry_at_the_next_tick() -> None:
    d = _starting()
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.advance(5.0)
    assert d.st() == State.BACKOFF
    d.send(StartDiagnosed("failed_exit", "engine_init", "x"))
    assert "backoff.retry" in d.emits(d.advance(1.0))
    assert d.st() != State.BACKOFF


def test_a_diagnosis_that_never_comes_holds_the_retry_for_a_bounded_time() -> None:
    d = _starting()
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert "backoff.retry" not in d.emits(d.advance(DIAGNOSIS_WAIT_S - 1.0))
    assert "backoff.retry" in d.emits(d.advance(2.0))


def test_a_served_run_that_died_is_retried_at_once_without_waiting_for_a_diagnosis() -> None:
    """Only a failed start waits: a serving engine that crashed is restarted at once, as Docker does."""
    d = _starting()
    d.send(LogReady())
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=50.0, error=None))
    assert d.st() == State.RUNNING
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.s.diagnosis_due_since is None
    assert "backoff.retry" in d.emits(d.advance(1.0))


def test_the_profile_key_is_the_one_its_container_will_serve_with(tmp_path: Path) -> None:
    """spec_key: the command's --api-key wins over an injected key file and VLLM_API_KEY, as in vLLM."""
    key_file = tmp_path / "p.key"
    key_file.write_text("from-file\n", encoding="utf-8")
    os.chmod(key_file, 0o600)
    src = ApiKeySource(file=key_file, inject_env="VLLM_API_KEY")
    plain = ContainerSpec(name="c", image="i", command=("serve", "m"))
    argv = ContainerSpec(name="c", image="i", command=("serve", "m", "--api-key", "a", "b"))
    env = ContainerSpec(name="c", image="i", env=(EnvVar("VLLM_API_KEY", "from-env"),))
    assert spec_key(src, plain) == "from-file"
    assert spec_key(src, argv) == "a"
    assert spec_key(None, argv) == "a"
    assert spec_key(None, env) == "from-env"
    assert spec_key(None, plain) is None
    assert key_expected(False, argv)
    assert key_expected(False, env)
    assert key_expected(src is not None, plain)
    assert not key_expected(False, plain)

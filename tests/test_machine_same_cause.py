"""The same root cause twice stops the retries; a death while serving is told with its cause (pure)."""

from __future__ import annotations

from supervisor.core.actions import CreateAndStart, Emit
from supervisor.core.events import (
    ContainerExited,
    ContainerStarted,
    PreflightDone,
    ResetRequested,
    Settled,
    SlotAcquired,
    StartDiagnosed,
    StartRequested,
)
from supervisor.core.profile_state import ProfileState, RootCause
from supervisor.core.states import State
from supervisor.core.vllm import root_cause as rc
from tests.test_machine_driver import Driver, fresh_boot, policy
from tests.test_machine_lastgood import _edited, _failed_start

NVFP4 = (
    "ValueError: NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration since "
    "kernel does not support quantization scheme QuantKey(u8, scale(f8e4m3fn, static, GroupShape(row=1, "
    "col=16)))"
)
WHERE = "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/nvfp4.py:304 in select"


def _driver() -> Driver:
    d = Driver(policy=policy(breaker={"limit": 3}, backoff={"initial_s": 1.0}))
    fresh_boot(d)
    return d


def _fail_start(d: Driver, line: str | None, fp: str = "fp1", outcome: str = "failed_engine_init") -> None:
    """One start of config ``fp`` that dies, then its diagnosis quoting ``line``."""
    if d.st() == State.BACKOFF:
        d.advance(5.0)
        assert d.st() == State.PREFLIGHT
    _start(d, fp)
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    assert d.st() in (State.BACKOFF, State.FATAL)
    cause = "engine_init" if outcome == "failed_engine_init" else outcome
    d.send(StartDiagnosed("failed_exit", cause, f"diagnosis of {line}", line, WHERE if line else None, fp))


def _start(d: Driver, fp: str) -> None:
    if d.st() == State.STOPPED:
        d.send(StartRequested())
    d.send(PreflightDone(ok=True, detail="", mem_available_gib=100.0))
    d.send(SlotAcquired())
    d.send(Settled(ok=True, detail="", mem_available_gib=100.0))
    assert d.st() == State.STARTING
    d.send(ContainerStarted(f"c-{d.now}", fingerprint=fp))


def _decisions(d: Driver) -> list[object]:
    return [a.fields["decision"] for a in d.log if isinstance(a, Emit) and a.name == "start.same_cause"]


def test_two_starts_dying_on_the_same_line_open_the_breaker_after_exactly_two() -> None:
    d = _driver()
    _fail_start(d, NVFP4 + " at 0x7f00aa pid=311")
    assert d.st() == State.BACKOFF
    _fail_start(d, NVFP4 + " at 0x7f11bb pid=512")  # addresses and pids differ: the same cause
    assert d.st() == State.FATAL
    assert len(d.records()) == 2
    assert _decisions(d) == [rc.FIRST, rc.SAME]
    alert = d.alerts()[-1]
    assert (alert.severity, alert.kind) == ("critical", "breaker.same_cause")
    assert "NvFp4 MoE backend 'VLLM_CUTLASS' does not support the deployment configuration" in alert.reason
    assert "nvfp4.py:304 in select" in alert.reason
    params = dict(alert.params)
    assert params["where"] == WHERE
    assert params["line"].startswith("ValueError: NvFp4")


def test_a_different_line_or_a_changed_config_keeps_the_ordinary_retries() -> None:
    d = _driver()
    _fail_start(d, "KeyError: 110")
    _fail_start(d, "AssertionError: QSA ring capacity 12 must divide the attention block size 1616")
    assert d.st() == State.BACKOFF
    _fail_start(d, "AssertionError: QSA ring capacity 12 must divide the attention block size 1616", fp="fp2")
    assert d.st() == State.FATAL  # the ordinary breaker: three failures in the window
    assert _decisions(d) == [rc.FIRST, rc.DIFFERENT, rc.DIFFERENT]
    assert d.alerts()[-1].kind == "breaker.open"


def test_memory_failures_are_never_the_same_cause() -> None:
    d = _driver()
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    _fail_start(d, oom, outcome="failed_oom")
    _fail_start(d, oom, outcome="failed_oom")
    assert d.st() == State.BACKOFF
    assert _decisions(d) == [rc.HOST, rc.HOST]
    kernel = "RuntimeError: CUDA error: unspecified launch failure"
    d.send(
        StartDiagnosed(
            "failed_exit", "kernel: NV_ERR_NO_MEMORY (pid 7 VLLM::Worker)", "x", kernel, None, "fp1"
        )
    )
    assert _decisions(d)[-1] == rc.HOST
    assert not rc.host_dependent("failed_exit", "kernel: Xid 13 (pid 7 VLLM::Worker)", "KeyError: 110")


def test_reset_and_a_ready_start_re_arm_the_rule() -> None:
    d = _driver()
    _fail_start(d, "KeyError: 110")
    _fail_start(d, "KeyError: 110")
    assert d.st() == State.FATAL
    d.send(ResetRequested())
    assert d.s.last_cause is None
    _start(d, "fp1")
    d.send(ContainerExited(exit_code=1, signal=None, oom_killed=False))
    d.send(StartDiagnosed("failed_exit", "engine_init", "x", "KeyError: 110", None, "fp1"))
    assert d.st() == State.BACKOFF  # the first failure after the reset: retried


def test_the_last_cause_survives_a_daemon_restart() -> None:
    d = _driver()
    _fail_start(d, "KeyError: 110")
    again = ProfileState.from_dict(d.s.to_dict())
    assert again.last_cause == RootCause("KeyError: 110", WHERE, "fp1")


def test_normalised_lines_compare_numbers_addresses_and_pids_away() -> None:
    a = rc.normalise("RuntimeError: Worker failed (pid=123) at 0xdeadbeef after 12.5 s")
    assert a == rc.normalise("RuntimeError: Worker failed (pid=99) at 0x1 after 3 s")
    assert rc.frame_of('  File "/v/nvfp4.py", line 304, in select') == "/v/nvfp4.py:304 in select"


def test_a_death_while_serving_alerts_its_cause_and_a_second_on_the_same_line_says_so() -> None:
    d = Driver(policy=policy(breaker={"limit": 3}))
    fresh_boot(d)
    d.to_running()
    line = "RuntimeError: Worker failed with error 'InvalidCxxCompiler: No working C++ compiler found'"
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    d.send(StartDiagnosed("died", "engine_dead", "the engine died", line, "/v/sampler.py:9 in f", None))
    first = d.alerts()[-1]
    assert first.kind == "engine.death_cause"
    assert line in first.reason
    assert "sampler.py:9" in first.reason
    assert "same error" not in first.reason
    d.advance(2.0)
    d.to_running("c2")
    d.send(ContainerExited(exit_code=0, signal=None, oom_killed=False))
    d.send(StartDiagnosed("died", "engine_dead", "the engine died", line, None, None))
    second = d.alerts()[-1]
    assert "the same error as the last death: a request or a bug that kills the engine" in second.reason
    assert "the breaker opens after 1 more" in second.reason
    assert d.st() != State.FATAL  # deaths keep the ordinary breaker


def test_drift_raises_one_warning_and_resolves_when_it_clears() -> None:
    from supervisor.core.events import DriftChecked

    d = Driver()
    fresh_boot(d)
    d.to_running()
    cid = d.s.container_id
    assert cid is not None
    d.send(DriftChecked(cid, ("env",), "env VLLM_X: 1 -> 2"))
    d.send(DriftChecked(cid, ("env",), "env VLLM_X: 1 -> 2"))  # still drifted: no second alert
    d.send(DriftChecked(cid, ("env", "image"), "env, image"))  # more drift, same condition: no new alert
    found = [a for a in d.alerts() if a.kind == "drift.found"]
    assert len(found) == 1
    assert found[0].severity == "warning"
    assert dict(found[0].params)["fields"] == "env"
    d.send(DriftChecked(cid, ()))
    cleared = [a for a in d.alerts() if a.kind == "drift.cleared"]
    assert len(cleared) == 1
    assert cleared[0].resolves


def test_a_timeout_is_never_the_same_cause_whatever_the_log_last_raised() -> None:
    assert rc.judge(None, None, "timeout", None) == rc.NOT_A_CRASH
    prev = RootCause("KeyError: 110", None, "fp1")
    assert rc.judge(prev, prev, "timeout_silence", None) == rc.NOT_A_CRASH
    assert rc.judge(prev, prev, "failed_smoke_think_leak", None) == rc.NOT_A_CRASH
    assert rc.judge(prev, prev, "failed_engine_init", "engine_init") == rc.SAME


def test_a_due_rollback_to_the_last_known_good_goes_ahead_of_the_same_cause() -> None:
    """rollback_after 2: a changed config dies twice on the same line. With ``rollback`` the next start
    creates the last known good (another config): BACKOFF, decision ``same_cause_rollback``, no breaker;
    with ``hold`` nothing else would start: FATAL after exactly two, as without a last known good."""
    for action, end, last in (
        ("rollback", State.BACKOFF, rc.ROLLBACK),
        ("hold", State.FATAL, rc.SAME),
    ):
        d = _edited(action)
        for cid in ("c2", "c3"):
            _failed_start(d, "new", cid)
            d.send(StartDiagnosed("failed_exit", "engine_init", "x", NVFP4, WHERE, "new"))
        assert (d.st(), _decisions(d)) == (end, [rc.FIRST, last]), action
        if action == "rollback":
            assert not [a for a in d.alerts() if a.kind == "breaker.same_cause"]
            d.advance(d.policy.backoff.max_s)
            d.send(PreflightDone(ok=True, detail="", mem_available_gib=90.0))
            d.send(SlotAcquired())
            assert CreateAndStart(last_good=True) in d.send(
                Settled(ok=True, detail="", mem_available_gib=90.0)
            )

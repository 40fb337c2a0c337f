"""The kill rule for kernel memory lines (core/host/kernel_rule.py, docs/wedge.md "Which kernel lines kill"):
plain values and a fake clock; the field's healthy GB10 boot and field report 000's dying load as fixtures."""

from __future__ import annotations

from pathlib import Path

from supervisor.core.actions import KillContainer
from supervisor.core.events import ContainerStopped, LogKvPool
from supervisor.core.host.attribution import NOBODY, OTHER, OURS
from supervisor.core.host.kernel_log import classify_kernel_line, uptime_of
from supervisor.core.host.kernel_rule import (
    IGNORE,
    KILL,
    LOADING_PROFILE,
    LOADING_SIZED,
    REMEMBER,
    SERVING,
    TOLERATE,
    KernelLine,
    KernelRule,
    judge,
)
from supervisor.core.host_events import KernelReport
from supervisor.core.states import State
from supervisor.core.vllm.diagnosis import diagnose
from tests.test_machine_driver import Driver, fresh_boot

DMESG = Path(__file__).parent / "fixtures" / "dmesg"
RULE = KernelRule()


def _lines(name: str) -> list[str]:
    return [ln for ln in (DMESG / name).read_text().splitlines() if ln and not ln.startswith("#")]


def _nv(ts: float, mem: float | None = 60.0, whose: str = NOBODY, backlog: bool = False) -> KernelLine:
    return KernelLine("nv_err_no_memory", whose, ts, backlog, mem)


def test_the_fields_healthy_boot_never_kills_while_the_profiler_probes() -> None:
    """The 60 lines of the healthy GB10 boot, at their own kernel times, memory fine: every one tolerated."""
    lines = _lines("020-gb10-healthy-boot-nv-err-profiler.log")
    assert len(lines) == 60
    recent: tuple[float, ...] = ()
    verdicts = []
    for raw in lines:
        ev = classify_kernel_line(raw)
        assert ev is not None
        assert ev.kind == "nv_err_no_memory"
        ts = uptime_of(raw)
        assert ts is not None
        verdict, recent, _ = judge(RULE, LOADING_PROFILE, _nv(ts), 400.0, recent)
        verdicts.append(verdict)
    assert set(verdicts) == {TOLERATE}
    assert len(recent) == 60  # the rate counts them all: they came within 10 s


def test_a_storm_or_a_line_near_the_floor_while_loading_kills() -> None:
    """Loading, profiler phase: the 121st line within 10 s kills; one line with MemAvailable under the
    near floor kills at once; policy warn never kills."""
    recent: tuple[float, ...] = ()
    verdict = ""
    for i in range(RULE.storm_lines + 1):
        verdict, recent, why = judge(RULE, LOADING_PROFILE, _nv(100.0 + i * 0.05), None, recent)
        if i < RULE.storm_lines:
            assert verdict == TOLERATE, i
    assert verdict == KILL
    assert "storm" in why
    # the same number of lines spread over a minute is no storm
    recent = ()
    for i in range(RULE.storm_lines + 1):
        verdict, recent, _ = judge(RULE, LOADING_PROFILE, _nv(100.0 + i * 0.5), None, recent)
    assert verdict == TOLERATE
    verdict, _, why = judge(RULE, LOADING_PROFILE, _nv(5.0, mem=4.5), None, ())
    assert (verdict, "4.5 GiB < 6 GiB" in why) == (KILL, True)
    warn = KernelRule(policy="warn")
    assert judge(warn, LOADING_PROFILE, _nv(5.0, mem=4.5), None, ())[0] == REMEMBER


def test_serving_or_a_sized_pool_kills_on_one_line_and_ours_always() -> None:
    """Serving, or loading after the KV pool was sized (the profiler is done): one line naming nobody
    kills; a line of our own process kills in any phase; another's line never does."""
    assert judge(RULE, SERVING, _nv(5.0), None, ())[0] == KILL
    assert judge(RULE, LOADING_SIZED, _nv(5.0), None, ())[0] == KILL
    assert judge(RULE, LOADING_PROFILE, KernelLine("oom_kill", OURS, 5.0), None, ())[0] == KILL
    assert judge(RULE, SERVING, KernelLine("oom_kill", OTHER, 5.0), None, ())[0] == REMEMBER
    assert judge(RULE, SERVING, KernelLine("xid", NOBODY, 5.0), None, ())[0] == REMEMBER


def test_a_line_printed_before_the_container_started_or_read_from_the_backlog_is_not_judged() -> None:
    """A line stamped before the container's start (beyond the 1 s slack) is never its own; a line read
    from the backlog (printed before the daemon read the log) is remembered, never a kill."""
    assert judge(RULE, SERVING, _nv(98.0), 100.0, ())[0] == IGNORE
    assert judge(RULE, SERVING, _nv(99.5), 100.0, ())[0] == KILL  # within the slack
    assert judge(RULE, SERVING, _nv(150.0, backlog=True), 100.0, ())[0] == REMEMBER
    assert judge(RULE, SERVING, _nv(150.0), 100.0, ())[0] == KILL


def _nv_report(ts: float, mem: float | None = 60.0, backlog: bool = False) -> KernelReport:
    line = _lines("020-gb10-healthy-boot-nv-err-profiler.log")[0].split("] ", 1)[1]
    return KernelReport("nv_err_no_memory", "NV_ERR_NO_MEMORY", line, ts, NOBODY, backlog, mem)


def test_the_machine_lets_a_healthy_load_finish_and_kills_once_the_pool_is_sized() -> None:
    """STARTING: the 60 profiler lines over 10 s leave the load alone (one kernel.tolerated in the history);
    after the KV pool line, one more line kills at once as a failed start."""
    d = Driver()
    fresh_boot(d)
    d.to_starting()
    for i in range(60):
        d.now += 10.0 / 60
        assert not [a for a in d.send(_nv_report(d.now)) if isinstance(a, KillContainer)], i
    assert d.st() == State.STARTING
    assert d.emits().count("kernel.tolerated") == 1
    assert d.s.kernel.recent == ("NV_ERR_NO_MEMORY",)  # kept for a failure that may follow
    d.send(LogKvPool(tokens=425_424, max_concurrency=1.6))
    d.now += 1
    acts = d.send(_nv_report(d.now))
    assert [a.container_id for a in acts if isinstance(a, KillContainer)] == ["c1"]
    d.send(ContainerStopped())
    assert d.records()[-1].outcome == "failed_kernel_memory"


def test_a_backlog_line_never_kills_an_adopted_serving_container() -> None:
    """A daemon restarted (another boot id in its saved position) reads the ring again: those lines are
    recorded, the serving container stays."""
    d = Driver()
    fresh_boot(d)
    d.to_running()
    acts = d.send(_nv_report(d.now, backlog=True))
    assert (d.st(), [a for a in acts if isinstance(a, KillContainer)]) == (State.RUNNING, [])
    assert "kernel.while_serving" not in d.emits(acts)


def test_field_report_000s_dying_load_is_still_diagnosed_from_its_kernel_line() -> None:
    """The load that died with only 'Engine core initialization failed' in vLLM's log: the diagnosis names
    the NV_ERR_NO_MEMORY line from the kernel's (the rule did not kill it: the engine's exit did)."""
    kernel = _lines("000-thor-seed-load-dies-nv-err.log")
    events = [classify_kernel_line(k) for k in kernel]
    assert [e.kind for e in events if e is not None] == ["nv_err_no_memory"]
    init_failed = (
        "(APIServer pid=1) ERROR 09-14 21:03:11 [api_server.py:1] RuntimeError: Engine core initialization "
        "failed. See root cause above. Failed core proc(s): {}"
    )
    report = diagnose([init_failed], kernel)
    assert report["vllm"]["outcome"] == "failed_engine_init"
    assert "NV_ERR_NO_MEMORY" in report["diagnosis"]

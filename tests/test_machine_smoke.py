"""Smoke gates in the machine (pure): asked for after the first generation, judged before RUNNING."""

from __future__ import annotations

import json

import pytest

from supervisor.core.actions import Action, Emit, RunSmokeGates
from supervisor.core.events import (
    ContainerObserved,
    ContainerStopped,
    DaemonStarted,
    DrainProgress,
    FirstGeneration,
    LogReady,
    MaintenanceRequested,
    SmokeChecked,
)
from supervisor.core.probe_events import GateResult
from supervisor.core.profile_state import GateRecord, ProfileState
from supervisor.core.states import State
from supervisor.core.vllm.smoke import (
    THINK_MARKERS,
    GateSpec,
    decode_rate,
    judge_contains,
    judge_decode_floor,
    judge_degeneration,
    judge_think_leak,
    judge_tool_call,
    judged_text,
    repeated_trigram_share,
)
from tests.test_machine_driver import OK_HEALTH, Driver, fresh_boot, policy

GATES = (
    GateSpec("stream", "stream_usage", "fail"),
    GateSpec("tools", "tool_call", "fail"),
    GateSpec("loop", "degeneration", "warn"),
)
POLICY = policy(smoke_gates=GATES, breaker={"limit": 3})
GOOD = (
    GateResult("stream", "stream_usage", True, "completion_tokens 16", 40.0, 16.0),
    GateResult("tools", "tool_call", True, "tool calls: get_weather", 30.0),
    GateResult("loop", "degeneration", True, "repeated 3-gram share 0.18", 90.0, 0.18),
)


def emitted(actions: list[Action], name: str) -> list[dict[str, object]]:
    """The fields of every Emit called `name`."""
    return [a.fields for a in actions if isinstance(a, Emit) and a.name == name]


def _answered(d: Driver, cid: str = "c1") -> list[Action]:
    """A start up to its first generation's success; returns that step's actions."""
    d.to_starting(cid)
    d.advance(10)
    d.send(LogReady())
    d.send(OK_HEALTH)
    return d.send(FirstGeneration(ok=True, latency_ms=120.0, error=None))


def _gated() -> Driver:
    d = Driver(policy=POLICY)
    fresh_boot(d)
    actions = _answered(d)
    assert d.st() == State.STARTING
    assert RunSmokeGates() in actions
    return d


def _with(results: tuple[GateResult, ...], name: str, ok: bool, detail: str = "") -> tuple[GateResult, ...]:
    return tuple(GateResult(r.name, r.kind, ok, detail) if r.name == name else r for r in results)


def test_gates_are_asked_for_after_the_first_generation_and_passed_gates_serve() -> None:
    """First generation ok -> RunSmokeGates (still STARTING); all gates ok -> RUNNING, ledger 'ready'."""
    d = _gated()
    assert emitted(d.log, "smoke.started") == [{"gates": ["stream", "tools", "loop"]}]
    assert d.records() == []  # nothing is in the ledger before the gates have spoken
    actions = d.send(SmokeChecked(GOOD))
    assert d.st() == State.RUNNING
    assert emitted(actions, "smoke.passed") == [{"gates": ["stream", "tools", "loop"]}]
    assert [r.outcome for r in d.records()] == ["ready"]
    assert emitted(actions, "start.ready")[0]["latency_ms"] == 120.0  # the first generation's latency
    assert [(r.name, r.policy, r.ok, r.at) for r in d.s.smoke] == [
        ("stream", "fail", True, d.now),
        ("tools", "fail", True, d.now),
        ("loop", "warn", True, d.now),
    ]
    assert d.s.last_reason == "smoke gates passed"


def test_a_failed_fail_gate_fails_the_start_and_counts_against_the_breaker() -> None:
    """A `fail` gate that fails: STOPPING (failed_start), then BACKOFF with outcome failed_smoke_<kind>."""
    d = _gated()
    actions = d.send(SmokeChecked(_with(GOOD, "tools", False, "tool calls: none")))
    assert d.st() == State.STOPPING
    assert d.s.pending == "failed_start"
    assert emitted(actions, "smoke.failed") == [
        {"gate": "tools", "kind": "tool_call", "policy": "fail", "detail": "tool calls: none", "value": None}
    ]
    assert "smoke.passed" not in d.emits(actions)
    d.send(ContainerStopped())
    assert d.st() == State.BACKOFF
    assert [r.outcome for r in d.records()] == ["failed_smoke_tool_call"]
    assert d.s.breaker.count(d.now) == 1
    failed = emitted(d.log, "start.failed")
    assert failed[-1]["outcome"] == "failed_smoke_tool_call"
    assert failed[-1]["detail"] == "tools: tool calls: none"
    assert [(a.severity, a.title) for a in d.alerts()] == [("warning", "start failed")]
    assert [(r.name, r.ok) for r in d.s.smoke] == [("stream", True), ("tools", False), ("loop", True)]


def test_a_failed_warn_gate_alerts_and_serves() -> None:
    """A `warn` gate that fails: RUNNING, a smoke.failed event and a warning alert; no smoke.passed."""
    d = _gated()
    actions = d.send(SmokeChecked(_with(GOOD, "loop", False, "repeated 3-gram share 0.98 > 0.50")))
    assert d.st() == State.RUNNING
    assert emitted(actions, "smoke.failed")[0]["policy"] == "warn"
    assert "smoke.passed" not in d.emits(actions)
    [alert] = d.alerts(actions)
    assert alert.severity == "warning"
    assert alert.title == "smoke gate loop failed (warn): serving anyway"
    assert alert.reason == "degeneration: repeated 3-gram share 0.98 > 0.50"
    assert (alert.old_state, alert.new_state) == ("STARTING", "RUNNING")
    assert [r.outcome for r in d.records()] == ["ready"]
    assert d.s.breaker.count(d.now) == 0


def test_several_failed_fail_gates_take_the_first_as_the_outcome() -> None:
    """Two `fail` gates failing: the outcome names the first in config order, the detail both."""
    d = _gated()
    results = _with(_with(GOOD, "stream", False, "no usage"), "tools", False, "tool calls: none")
    d.send(SmokeChecked(results))
    d.send(ContainerStopped())
    assert d.records()[-1].outcome == "failed_smoke_stream_usage"
    assert emitted(d.log, "start.failed")[-1]["detail"] == "stream: no usage; tools: tool calls: none"


def test_a_failed_gate_of_a_maintenance_restart_is_the_critical_maintenance_alert() -> None:
    """Maintenance restart whose `fail` gate fails: 'maintenance restart failed' (critical)."""
    d = _gated()
    d.send(SmokeChecked(GOOD))
    d.send(MaintenanceRequested())
    d.send(DrainProgress(requests_running=0.0))
    d.send(ContainerStopped())
    d.log.clear()
    _answered(d, "c2")
    assert d.st() == State.STARTING
    d.send(SmokeChecked(_with(GOOD, "stream", False, "no usage in the last of 17 chunks")))
    d.send(ContainerStopped())
    assert d.st() == State.BACKOFF
    titles = [(a.severity, a.title) for a in d.alerts()]
    assert ("critical", "maintenance restart failed") in titles


def test_answers_out_of_turn_are_ignored() -> None:
    """A SmokeChecked nobody asked for changes nothing; a second first generation does not skip the gates."""
    d = Driver(policy=POLICY)
    fresh_boot(d)
    d.to_starting()
    d.send(LogReady())
    before = d.s
    assert d.send(SmokeChecked(GOOD)) == []
    assert d.s == before
    d.send(OK_HEALTH)
    d.send(FirstGeneration(ok=True, latency_ms=1.0, error=None))
    gated = d.s
    assert d.send(FirstGeneration(ok=True, latency_ms=1.0, error=None)) == []
    assert d.s == gated
    assert d.st() == State.STARTING


def test_a_gate_removed_by_a_reload_is_dropped() -> None:
    """A result for a gate the policy no longer has is neither judged nor kept."""
    d = _gated()
    d.policy = policy(smoke_gates=GATES[:1])
    d.send(SmokeChecked(_with(GOOD, "tools", False, "none")))
    assert d.st() == State.RUNNING
    assert [r.name for r in d.s.smoke] == ["stream"]


def test_no_gates_and_adopted_containers_go_straight_to_running() -> None:
    """Without gates, or for an adopted container, the first generation alone decides (no RunSmokeGates)."""
    plain = Driver()
    fresh_boot(plain)
    assert RunSmokeGates() not in _answered(plain)
    assert plain.st() == State.RUNNING
    adopted = Driver(policy=POLICY)
    adopted.send(DaemonStarted(boot_changed=False))
    adopted.send(ContainerObserved(container_id="c9", running=True, exit_code=None))
    adopted.send(OK_HEALTH)
    actions = adopted.send(FirstGeneration(ok=True, latency_ms=5.0, error=None))
    assert RunSmokeGates() not in actions
    assert adopted.st() == State.RUNNING


def test_gate_records_survive_persistence_and_show_in_status() -> None:
    """The last results are persisted (JSON round trip) and listed in the status document."""
    d = _gated()
    d.send(SmokeChecked(GOOD))
    back = ProfileState.from_dict(json.loads(json.dumps(d.s.to_dict())))
    assert back == d.s
    assert isinstance(back.smoke[0], GateRecord)
    status = d.s.status_dict(d.now)["smoke"]
    assert status[2] == {
        "name": "loop",
        "kind": "degeneration",
        "policy": "warn",
        "ok": True,
        "detail": "repeated 3-gram share 0.18",
        "at": d.now,
        "latency_ms": 90.0,
        "value": 0.18,
    }


def test_repeated_trigram_share_tells_prose_from_loops() -> None:
    """Prose scores low, '!!!!' and one word forever near 1, a looping sentence in between."""
    prose = (
        "The supervisor keeps a model server alive around the clock on a unified memory box. It starts "
        "the container, watches its log, probes its health and restarts it when it fails."
    )
    assert repeated_trigram_share(prose) < 0.3
    assert repeated_trigram_share("!" * 64) > 0.95
    assert repeated_trigram_share(" the" * 64) > 0.95
    assert 0.6 < repeated_trigram_share("Paris is the capital of France. " * 3) < 0.8
    assert repeated_trigram_share("ab") == 0.0


def test_judges_say_why() -> None:
    """The degeneration and contains judges give a verdict and a detail with an excerpt."""
    ok, share, detail = judge_degeneration("!" * 64, 0.5)
    assert not ok
    assert share > 0.95
    assert detail.startswith("repeated 3-gram share 0.9")
    assert "'!!!!" in detail
    assert judge_degeneration("   ", 0.5)[0] is False
    assert judge_degeneration("a fine and varied answer", 0.5)[0] is True
    assert judge_contains("Paris is nice", "Paris") == (True, "found 'Paris'")
    ok, detail = judge_contains("Lyon", "Paris")
    assert not ok
    assert detail == "'Paris' not in the answer: 'Lyon'"


def test_reasoning_aware_judges() -> None:
    """The judged text falls back to the reasoning only when the content is empty; think_leak names the
    markup it found; the decode rate counts every token up to the last chunk; tool_call names the
    mode that was tried."""
    assert judged_text("Paris", "I think") == "Paris"
    assert judged_text(" \n", "I think") == "I think"
    assert judge_think_leak("<think>hm</think>Paris", THINK_MARKERS) == (
        False,
        "reasoning markup <think>, </think> in the content: '<think>hm</think>Paris'",
    )
    assert judge_think_leak("Paris", THINK_MARKERS) == (True, "no reasoning in the content")
    assert decode_rate(32, 2000.0) == 16.0
    assert decode_rate(0, 2000.0) is None
    assert decode_rate(32, None) is None
    assert judge_decode_floor(16.0, 33, 15) == (True, "16.0 tokens/s >= 15 over 33 tokens")
    assert judge_decode_floor(14.5, 33, 15) == (False, "14.5 tokens/s < 15 over 33 tokens")
    assert judge_decode_floor(None, 1, 15) == (False, "decode speed not measurable (1 tokens streamed)")
    assert judge_tool_call("f", ("g", "f"), "auto", "") == (True, "tool calls (auto): g, f")
    assert judge_tool_call("f", (), "required", "no") == (False, "tool calls (required): none; answer 'no'")


@pytest.mark.parametrize(
    "content",
    [
        "Thinking Process:\n\n1. **Analyze the Request:** The user wants the capital of France.",  # seed 001
        "**Thinking Process**:\n1. The user asks",
        "## Thought process: the user asks for a city",
        "思考过程：\n\n1. **分析请求：** 用户想知道法国的首都。",
        "思考：用户问的是首都",
        "Okay, the user is asking for the capital of France. Let me recall.",
        "好的，用户问的是法国的首都。",
    ],
)
def test_a_reasoning_preamble_in_the_content_fails_think_leak_by_its_shape(content: str) -> None:
    ok, detail = judge_think_leak(content, THINK_MARKERS)
    assert not ok
    assert detail.startswith("a reasoning preamble opens the content: ")


@pytest.mark.parametrize(
    "content",
    [
        "Paris.",
        "The capital of France is Paris. Thinking process: not needed here.",
        "巴黎是法国的首都。",
        "Okay.",
        "Reasoning about cities is fun, but the answer is Paris.",
    ],
)
def test_a_clean_answer_passes_think_leak(content: str) -> None:
    assert judge_think_leak(content, THINK_MARKERS) == (True, "no reasoning in the content")

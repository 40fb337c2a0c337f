"""Smoke gates end to end: the real daemon, simulators spoiled by their VSIM_* knobs, a real webhook."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import WebhookReceiver, wait_for
from tests.sim_world import World

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _gates(*gates: dict[str, Any]) -> dict[str, Any]:
    return {"smoke": {"gates": list(gates)}}


def test_a_failing_fail_gate_fails_the_start_and_backs_off(world: World) -> None:
    """No tool call from the server, gate policy fail: the start fails (failed_smoke_tool_call), BACKOFF."""
    world.profile(
        env={"VSIM_TOOL_CALLS": "0", "VSIM_MAX_TOKENS_DEFAULT": "64"},
        extra=_gates({"kind": "tool_call", "policy": "fail", "timeout_s": 10}),
    )
    d = world.daemon(breaker_limit=5, backoff_initial_s=30.0, backoff_max_s=30.0)
    st = d.wait_state("p", "BACKOFF", 60)
    assert st["breaker"]["emergencies"] == 1
    [gate] = st["smoke"]
    assert (gate["name"], gate["kind"]) == ("tool_call", "tool_call")
    assert (gate["policy"], gate["ok"]) == ("fail", False)
    assert gate["detail"].startswith("tool calls (required): none; answer 'the quick brown fox")
    assert "; tool calls (auto): none; answer 'the quick brown fox" in gate["detail"]
    names = d.event_names("p")
    assert names.index("smoke.started") < names.index("smoke.failed") < names.index("start.failed")
    assert "start.ready" not in names
    assert "smoke.passed" not in names
    failed = next(e for e in d.events("p") if e["name"] == "start.failed")
    assert failed["fields"]["outcome"] == "failed_smoke_tool_call"
    # the ledger row follows BACKOFF once the failed start is diagnosed (the kernel ring is read first)
    rows = wait_for(lambda: d.call("history", name="p", n=5)["data"]["starts"], 30, message="the row")
    assert [r["outcome"] for r in rows] == ["failed_smoke_tool_call"]


def test_a_failing_warn_gate_serves_and_alerts(world: World, webhook: WebhookReceiver) -> None:
    """Degenerate text with a warn gate: RUNNING, a warning alert at the webhook; the stream gate passed."""
    world.profile(
        env={"VSIM_DEGENERATE": "!", "VSIM_MAX_TOKENS_DEFAULT": "64"},
        extra=_gates(
            {"kind": "stream_usage", "policy": "fail", "timeout_s": 10},
            {"kind": "degeneration", "name": "loop", "policy": "warn", "threshold": 0.5, "timeout_s": 10},
        ),
    )
    d = world.daemon(
        extra={"alerts": {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/x"}]}}
    )
    st = d.wait_state("p", "RUNNING", 60)
    stream, loop = st["smoke"]
    assert (stream["name"], stream["ok"], stream["value"]) == ("stream_usage", True, 16.0)
    assert (loop["name"], loop["policy"], loop["ok"]) == ("loop", "warn", False)
    assert loop["value"] > 0.95
    smoke_failed = [e["fields"] for e in d.events("p") if e["name"] == "smoke.failed"]
    assert [(f["gate"], f["policy"]) for f in smoke_failed] == [("loop", "warn")]
    rows = d.call("history", name="p", n=5)["data"]["starts"]
    assert [r["outcome"] for r in rows] == ["ready"]

    def warnings() -> list[dict[str, Any]]:
        bodies = [r.json() for r in webhook.received() if r.path.startswith("/alert/")]
        return [b for b in bodies if b.get("title", "").startswith("smoke gate loop failed")]

    [alert] = wait_for(warnings, 20, message="the smoke warning at the webhook")
    assert alert["severity"] == "warning"
    assert alert["new_state"] == "RUNNING"
    assert alert["reason"].startswith("degeneration: repeated 3-gram share 0.9")

"""Every labelled counter is on the real endpoint at 0 from the first scrape (Prometheus' increase())."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from supervisor.core.fleet.metrics_tally import (
    EARLIER,
    EMERGENCY_CAUSES,
    KERNEL_EVENT_KINDS,
    RESTART_CAUSES,
    emergency_cause,
    label,
)
from supervisor.core.vocab import Outcome, Pending
from tests.harness import REPO
from tests.metrics_fixtures import status_doc
from tests.test_metrics import samples, scrape, serving

R, E, K, A = (f"vllm_supervisor_{n}_total" for n in ("restarts", "emergencies", "kernel_events", "alerts"))


def _doc_with_channel() -> dict[str, object]:
    doc = status_doc(restarts=0, emergencies=0)
    doc["daemon"]["alerts"] = {"channels": [{"name": "ops", "state": "ok"}]}
    return doc


def test_every_known_label_value_is_present_at_zero_before_any_event() -> None:
    """A fresh daemon (no restart yet): every restart/emergency cause, kernel kind, channel result at 0."""
    with serving(_doc_with_channel()) as server:
        got = samples(scrape(server))
    for cause in RESTART_CAUSES:
        assert got[(R, (("cause", cause), ("profile", "qwen")))] == 0, cause
    for cause in EMERGENCY_CAUSES:
        assert got[(E, (("cause", cause), ("profile", "qwen")))] == 0, cause
    for kind in KERNEL_EVENT_KINDS:
        assert got[(K, (("kind", kind),))] == 0, kind
    assert got[(A, (("channel", "ops"), ("result", "ok")))] == 0
    assert got[(A, (("channel", "ops"), ("result", "failed")))] == 0
    assert {"failed_oom", "failed_config", "failed_unauthorized", "probe_failed", "restart"} <= set(
        RESTART_CAUSES
    )


def test_the_first_restart_moves_its_series_from_zero_to_one() -> None:
    """The series of the first restart's cause existed at 0 before; after the event it is 1, others 0."""
    with serving(_doc_with_channel()) as server:
        before = samples(scrape(server))
        server.observe_event("qwen", "emergency.stop", {"reason": "4 consecutive probe failures (health)"})
        server.observe_event("qwen", "backoff.scheduled", {"attempt": 1})
        server.observe_event("qwen", "kernel.xid", {"xid": 31})
        server.observe_alert("ops", False)
        after = samples(scrape(server))
    key = (R, (("cause", "probe_failed"), ("profile", "qwen")))
    assert (before[key], after[key]) == (0, 1)
    assert after[(E, (("cause", "probe_failed"), ("profile", "qwen")))] == 1
    assert after[(K, (("kind", "xid"),))] == 1
    assert after[(A, (("channel", "ops"), ("result", "failed")))] == 1
    assert after[(R, (("cause", EARLIER), ("profile", "qwen")))] == 0
    assert sum(v for k, v in after.items() if k[0] == R) == 1


#: Words in the machine that look like outcomes but are not (a stop's ``pending``).
NOT_OUTCOMES = {Pending.FAILED_START}
_OUTCOME_LIKE = re.compile(r"^(?:failed(?:_[a-z_]+)?|timeout(?:_[a-z]+)?)$")


def _machine_outcome_literals() -> set[str]:
    """Every string constant of the machine that reads like a start outcome (``failed_*``, ``timeout*``)."""
    found: set[str] = set()
    for path in (REPO / "supervisor" / "core" / "machine").glob("*.py"):
        for node in ast.walk(ast.parse(Path(path).read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _OUTCOME_LIKE.match(node.value)
            ):
                found.add(node.value)
    return found - NOT_OUTCOMES


def test_every_outcome_the_machine_records_is_a_known_cause() -> None:
    """The machine names outcomes only through Outcome (a string literal there would be an outcome the
    metrics do not know, born at 1), and every failed Outcome is a restart cause at 0 from the start."""
    assert _machine_outcome_literals() == set()
    failed = {o for o in Outcome if o.failed}
    assert {"failed_create", "timeout_silence", "failed_exit", "failed_smoke_tool_call"} <= failed
    assert {label(o) for o in failed} <= set(RESTART_CAUSES)


def test_emergency_causes_cover_every_cause_the_classifier_gives() -> None:
    """emergency_cause() never returns a cause outside EMERGENCY_CAUSES."""
    reasons = ["probe failure", "engine dead", "memory guard", "stalled", "container exited", "xyz", ""]
    assert {emergency_cause(r) for r in reasons} == set(EMERGENCY_CAUSES)

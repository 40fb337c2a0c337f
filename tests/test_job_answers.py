"""Every pool job kind has a crash answer (or a reason none is needed) and a deadline (issue 39 item 8):
a job that raises or hangs never leaves the machine waiting or its kind "running" for ever."""

from __future__ import annotations

import ast

from supervisor.core.clock import FakeClock
from supervisor.daemon.executor import answers
from supervisor.daemon.executor.answers import CRASH_ANSWERS, NO_ANSWER, InFlight, deadline_s, family
from tests.harness import REPO
from tests.test_machine_driver import Driver, fresh_boot


def _submitted_kinds() -> set[str]:
    """The kind of every job the executor submits (the literal, or an f-string's literal head)."""
    tree = ast.parse((REPO / "supervisor/daemon/executor/effects.py").read_text(encoding="utf-8"))
    kinds: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "_submit"
        ):
            arg = node.args[1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                kinds.add(arg.value)
            elif isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant):
                kinds.add(str(arg.values[0].value) + "<id>")
        if isinstance(node, ast.Assign) and isinstance(
            node.value, ast.JoinedStr
        ):  # kind = f"change-alert-.."
            head = node.value.values[0]
            if isinstance(head, ast.Constant) and str(head.value).endswith("-"):
                kinds.add(str(head.value) + "<id>")
        if isinstance(node, ast.IfExp) and isinstance(node.body, ast.JoinedStr):  # stop, kill, stop-unwanted
            for part in (node.body, node.orelse):
                for c in ast.walk(part):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        kinds.add(c.value + ("<id>" if c.value.endswith("-") else ""))
    return kinds


def test_every_kind_the_executor_submits_has_an_answer_or_a_reason() -> None:
    kinds = _submitted_kinds()
    assert {
        "create",
        "settle",
        "stop",
        "drift",
        "round",
        "after-stop-<id>",
        "change-alert-<id>",
    } <= kinds  # the walk sees them
    orphaned = sorted(k for k in kinds if family(k.replace("<id>", "x")) not in {*CRASH_ANSWERS, *NO_ANSWER})
    assert orphaned == []


def test_every_crash_answer_is_taken_by_the_machine() -> None:
    """Each answer, sent to a profile in PREFLIGHT (a fresh start), is handled without an exception."""
    for kind, answer in CRASH_ANSWERS.items():
        d = Driver()
        fresh_boot(d)
        d.send(answer(f"internal error in {kind}: RuntimeError: x"))


def test_a_hung_job_is_released_at_its_deadline_and_never_releases_its_successor() -> None:
    clock = FakeClock()
    running = InFlight(clock.monotonic)
    old = running.claim("drift")
    clock.advance(deadline_s("drift") - 1)
    assert running.overdue() == []
    assert "drift" in running
    clock.advance(2)
    [(kind, age)] = running.overdue()
    assert (kind, age) == ("drift", deadline_s("drift") + 1)
    assert "drift" not in running  # a new drift job may run
    new = running.claim("drift")
    running.release("drift", old)  # the hung job ends at last: the new claim stays
    assert "drift" in running
    running.release("drift", new)
    assert "drift" not in running


def test_deadlines_cover_the_longest_legitimate_run() -> None:
    assert deadline_s("stop") >= 3600 + 600  # stop.grace_s is at most 1 h (config/bounds.py)
    assert deadline_s("alert-123") == answers.DEFAULT_DEADLINE_S
    assert deadline_s("stop-unwanted-abc") == answers.DEFAULT_DEADLINE_S
    assert family("change-alert-1") == "change-alert"

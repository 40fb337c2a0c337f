"""Kernel warnings about other processes: deduplicated by kind, at most one per kind per window, the
held-back count in the next (pure: plain values and the machine driver's fake clock)."""

from __future__ import annotations

from supervisor.core.actions import Emit
from supervisor.core.host.kernel_quiet import QUIET_WINDOW_S, KernelQuiet, held_note
from supervisor.core.host_events import KernelReport
from supervisor.core.profile_state import ProfileState
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy


def _oom(pid: int, whose: str = "other") -> KernelReport:
    line = f"Out of memory: Killed process {pid} (stress) total-vm:1kB"
    return KernelReport("oom_kill", f"OOM kill (pid {pid} stress)", line, 1.0, whose)


def test_admit_holds_a_kind_back_for_the_window_and_counts() -> None:
    q = KernelQuiet()
    q, first = q.admit("oom_kill", 100.0)
    assert first == 0
    for i in range(3):
        q, got = q.admit("oom_kill", 101.0 + i)
        assert got is None
    q, xid = q.admit("xid", 105.0)  # another kind has its own allowance
    assert xid == 0
    q, late = q.admit("oom_kill", 100.0 + QUIET_WINDOW_S)
    assert late == 3  # the three held back are reported with the next one
    q, again = q.admit("oom_kill", 101.0 + QUIET_WINDOW_S)
    assert again is None
    assert dict(zip(q.kinds, q.held, strict=True)) == {"oom_kill": 1, "xid": 0}


def test_a_clock_that_went_back_does_not_hold_forever() -> None:
    q, _ = KernelQuiet().admit("xid", 10_000.0)
    _q, got = q.admit("xid", 50.0)
    assert got == 0


def test_held_note() -> None:
    assert held_note(0) == ""
    assert "+7 more" in held_note(7)
    assert "10 min" in held_note(7)


def test_a_flood_of_other_users_oom_kills_is_one_warning_per_window() -> None:
    """100 OOM kills of someone else's processes (each a new pid) while RUNNING: one warning, then one
    more after the window that says 99 were held back; the profile serves on."""
    d = Driver(policy=policy(host={"kernel_memory_error": "kill"}))
    fresh_boot(d)
    d.to_running()
    alerts = []
    for pid in range(1000, 1100):
        alerts += d.alerts(d.send(_oom(pid)))
        d.advance(1)
    assert [a.title for a in alerts] == ["kernel: OOM kill (pid 1000 stress) while serving"]
    assert d.st() == State.RUNNING  # another's OOM kill never kills ours
    d.advance(QUIET_WINDOW_S)
    acts = d.send(_oom(5000))
    late = d.alerts(acts)
    assert len(late) == 1
    assert "+99 more" in late[0].reason
    emitted = [a for a in acts if isinstance(a, Emit) and a.name == "kernel.while_serving"]
    assert emitted[0].fields["held_back"] == 99


def test_lines_about_our_own_container_are_not_limited() -> None:
    """An Xid of our own process warns each time it is new, however many others were held back."""
    d = Driver(policy=policy(host={"kernel_memory_error": "warn"}))
    fresh_boot(d)
    d.to_running()
    for pid in (1, 2, 3):
        d.send(KernelReport("xid", f"Xid 31 (pid {pid} stress)", "NVRM: Xid ...", 1.0, "other"))
    ours = [
        d.alerts(d.send(KernelReport("xid", f"Xid 31 (pid {pid} VLLM::EngineCor)", "NVRM: Xid", 1.0, "ours")))
        for pid in (10, 11)
    ]
    assert [len(a) for a in ours] == [1, 1]


def test_the_limit_survives_a_restart_of_the_daemon() -> None:
    d = Driver()
    fresh_boot(d)
    d.to_running()
    d.send(_oom(1))
    d.send(_oom(2))
    back = ProfileState.from_dict(d.s.to_dict())
    assert (back.kernel.quiet_kinds, back.kernel.quiet_held) == (("oom_kill",), (1,))

"""The quota of kernel lines naming another's process (core/host/kernel_quota.py): a fake clock."""

from __future__ import annotations

from supervisor.core.host.attribution import PidLookup, other_for_all
from supervisor.core.host.kernel_quota import KernelQuota


def test_a_flood_of_anothers_oom_kills_is_held_back_and_counted_once_per_window() -> None:
    """1000 lines in 10 s: 30 go through, 970 are held and reported once when the window ends; another kind
    has its own quota; the next window opens fresh."""
    q = KernelQuota(per_window=30, window_s=60.0)
    passed = 0
    for i in range(1000):
        q, ok = q.admit("oom_kill", 100.0 + i * 0.01)
        passed += ok
    q, ok = q.admit("xid", 105.0)
    assert (passed, ok) == (30, True)
    q, ended = q.due(159.0)
    assert ended == []
    q, ended = q.due(160.0)
    assert ended == [("oom_kill", 970, 100.0)]
    assert q.due(161.0)[1] == []  # reported once
    q, ok = q.admit("oom_kill", 170.0)
    assert ok


def test_only_lines_that_name_no_container_of_anyone_are_held() -> None:
    """A live pid in no container, or a gone pid with a name vLLM never runs as: other for everyone. A pid
    in some container, a gone python process or a line naming nobody: judged, never held."""
    assert other_for_all(17, None, PidLookup(True, None))
    assert other_for_all(17, False, PidLookup(False, None))
    assert not other_for_all(17, None, PidLookup(True, "a" * 64))
    assert not other_for_all(17, True, PidLookup(False, None))
    assert not other_for_all(None, None, None)

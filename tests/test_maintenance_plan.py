"""Pure maintenance decisions: catch-up after downtime and the one-profile-at-a-time round."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from supervisor.core.maintenance.plan import (
    CatchUp,
    Finished,
    MaintenanceRound,
    Skipped,
    plan_catch_up,
)
from supervisor.core.maintenance.schedule import CronSchedule

H = 3600.0
BERLIN = ZoneInfo("Europe/Berlin")


def at(y: int, mo: int, d: int, h: int = 0, mi: int = 0) -> float:
    """Epoch seconds of a Berlin wall-clock time."""
    return datetime(y, mo, d, h, mi, tzinfo=BERLIN).timestamp()


def test_first_run_catches_nothing_up() -> None:
    """Without a persisted last evaluation nothing is run or recorded as missed."""
    assert plan_catch_up(None, 1000.0, [900.0], catch_up_s=6 * H) == CatchUp()
    assert CatchUp().kind == "nothing"


def test_on_time_fire_runs_even_without_catch_up() -> None:
    """A fire half a second old (the daemon loop's period) runs even with catch_up_s 0."""
    d = plan_catch_up(999.0, 1000.5, [1000.0], catch_up_s=0)
    assert d == CatchUp(run=1000.0)
    assert d.kind == "run"


def test_several_missed_fires_run_once() -> None:
    """Three hourly fires missed within catch_up_s: the latest runs once, the others are coalesced."""
    now = 100 * H + 60
    d = plan_catch_up(96 * H + 1, now, [97 * H, 98 * H, 99 * H, 100 * H], catch_up_s=6 * H)
    assert d.run == 100 * H
    assert d.coalesced == (97 * H, 98 * H, 99 * H)
    assert d.missed == ()


def test_old_fires_are_missed_and_recent_runs() -> None:
    """Fires older than catch_up_s are missed; a recent one still runs; the boundary age counts as recent."""
    now = 1000 * H
    d = plan_catch_up(0.0, now, [now - 10 * H, now - 6 * H], catch_up_s=6 * H)
    assert d == CatchUp(run=now - 6 * H, missed=(now - 10 * H,))
    d = plan_catch_up(0.0, now, [now - 6 * H - 1], catch_up_s=6 * H)
    assert d == CatchUp(missed=(now - 6 * H - 1,))
    assert d.kind == "missed"


def test_fires_outside_the_window_are_ignored() -> None:
    """Fires at or before last_evaluated or after now (a clock stepped back) are not acted on."""
    d = plan_catch_up(100.0, 200.0, [50.0, 100.0, 300.0], catch_up_s=H)
    assert d == CatchUp()


def test_catch_up_with_a_real_schedule() -> None:
    """Weekly Sunday 04:00: down from Saturday noon, back 07:00 Sunday runs; back 11:00 records missed."""
    sched = CronSchedule.parse("0 4 * * 0", "Europe/Berlin")
    last = at(2026, 12, 5, 12)
    early, late = at(2026, 12, 6, 7), at(2026, 12, 6, 11)
    d = plan_catch_up(last, early, sched.fires_between(last, early), catch_up_s=6 * H)
    assert d.run == at(2026, 12, 6, 4)
    assert sched.describe(d.run) == "Sun 2026-12-06 04:00 CET"
    d = plan_catch_up(last, late, sched.fires_between(last, late), catch_up_s=6 * H)
    assert d == CatchUp(missed=(at(2026, 12, 6, 4),))


def serving(**states: str) -> dict[str, str]:
    """Profile -> state name, in keyword (= config) order."""
    return dict(states)


def test_round_restarts_one_profile_at_a_time() -> None:
    """Each profile starts only after the previous is RUNNING again; the round then completes."""
    r0 = MaintenanceRound()
    r1, s = r0.step(serving(a="RUNNING", b="RUNNING", c="DEGRADED"), due=True)
    assert s.start == "a"
    assert r1.queue == ("b", "c")
    assert r0 == MaintenanceRound()  # the old value is untouched
    r2, s = r1.step(serving(a="RUNNING", b="RUNNING", c="DEGRADED"), due=False)
    assert s.start is None  # the request has not taken effect yet: a is not "back" already
    assert s.waiting_for == "a"
    for st in ("MAINTENANCE", "STOPPING", "PREFLIGHT", "STARTING"):
        r2, s = r2.step(serving(a=st, b="RUNNING", c="DEGRADED"), due=False)
        assert s.start is None
        assert s.waiting_for == "a"
    r3, s = r2.step(serving(a="RUNNING", b="RUNNING", c="DEGRADED"), due=False)
    assert s.finished == (Finished("a", "done", "RUNNING"),)
    assert s.start == "b"
    r4, _ = r3.step(serving(a="RUNNING", b="MAINTENANCE", c="DEGRADED"), due=False)
    r5, s = r4.step(serving(a="RUNNING", b="RUNNING", c="DEGRADED"), due=False)
    assert s.start == "c"
    r6, _ = r5.step(serving(a="RUNNING", b="RUNNING", c="STARTING"), due=False)
    r7, s = r6.step(serving(a="RUNNING", b="RUNNING", c="DEGRADED"), due=False)
    assert s.completed
    assert s.finished == (Finished("c", "done", "DEGRADED"),)
    assert r7 == MaintenanceRound(done=("a", "b", "c"))
    assert not r7.active


def test_profile_not_serving_at_its_turn_is_skipped() -> None:
    """Profiles not serving at their turn are skipped (with their state); the next starts in that step."""
    rnd, s = MaintenanceRound().step(serving(a="BACKOFF", b="STOPPED", c="RUNNING"), due=True)
    assert s.skipped == (Skipped("a", "BACKOFF"), Skipped("b", "STOPPED"))
    assert s.start == "c"
    assert rnd.skipped == ("a", "b")


def test_failed_restart_moves_on() -> None:
    """A profile that ends in BACKOFF after leaving RUNNING has failed; the next profile starts."""
    rnd, _ = MaintenanceRound().step(serving(a="RUNNING", b="RUNNING"), due=True)
    rnd, _ = rnd.step(serving(a="MAINTENANCE", b="RUNNING"), due=False)
    rnd, s = rnd.step(serving(a="BACKOFF", b="RUNNING"), due=False)
    assert s.finished == (Finished("a", "failed", "BACKOFF"),)
    assert s.start == "b"
    assert rnd.failed == ("a",)


def test_vanished_profile_is_skipped_or_failed() -> None:
    """A profile missing from the states is skipped at its turn, and failed when it was the current one."""
    rnd, s = MaintenanceRound().step(serving(a="RUNNING", b="RUNNING"), due=True)
    rnd, s = rnd.step(serving(b="RUNNING"), due=False)
    assert s.finished == (Finished("a", "failed", "absent"),)
    assert s.start == "b"
    rnd, s = MaintenanceRound(queue=("x",), active=True).step(serving(a="RUNNING"), due=False)
    assert s.skipped == (Skipped("x", "absent"),)
    assert s.completed


def test_due_while_a_round_runs_is_ignored() -> None:
    """A second fire during a round does not restart or extend it; the step says it was ignored."""
    rnd, _ = MaintenanceRound().step(serving(a="RUNNING", b="RUNNING"), due=True)
    again, s = rnd.step(serving(a="MAINTENANCE", b="RUNNING"), due=True)
    assert s.ignored_due
    assert again.queue == ("b",)
    assert again.current == "a"


def test_idle_round_without_due_does_nothing() -> None:
    """Idle and not due: no start, no completion; nothing serving: the round completes at once."""
    rnd, s = MaintenanceRound().step(serving(a="RUNNING"), due=False)
    assert rnd == MaintenanceRound()
    assert s.start is None
    assert not s.completed
    rnd, s = MaintenanceRound().step(serving(a="FATAL"), due=True)
    assert s.completed
    assert rnd == MaintenanceRound(skipped=("a",))

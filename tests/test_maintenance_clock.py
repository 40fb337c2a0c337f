"""Scheduled maintenance in the fleet step on a real state directory: crontab weekdays, catch-up, few
writes of maintenance.json (through the executor's fleet jobs and the real store)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from supervisor.adapters.store.state import MAINTENANCE_FILE, Store
from supervisor.config import load_config
from supervisor.core.clock import FakeClock
from supervisor.core.fleet import maintenance
from supervisor.core.fleet.actions import FleetAction, Record, SaveMaintenance
from supervisor.core.fleet.policy import MaintenanceRule
from supervisor.core.fleet.state import FleetState
from supervisor.core.maintenance.duty import MaintenanceDuty
from supervisor.core.maintenance.schedule import CronSchedule
from supervisor.daemon.build import policy_for
from supervisor.daemon.executor.fleet_jobs import FleetJobs, Keepers
from supervisor.daemon.executor.records import Records
from supervisor.daemon.persist import restore_maintenance
from tests.daemon_harness import ProfileSpec, write_daemon_config, write_profile

BERLIN = ZoneInfo("Europe/Berlin")
WEEKLY = MaintenanceRule(
    CronSchedule.parse("0 4 * * 0", "Europe/Berlin"), 21600.0, "0 4 * * 0", "Europe/Berlin"
)


def at(text: str) -> float:
    """Epoch of a Berlin wall time 'YYYY-MM-DD HH:MM'."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=BERLIN).timestamp()


class Run:
    """One daemon run as the loop drives maintenance: the snapshot read back at start, one fleet tick at a
    time, ``SaveMaintenance`` written by the executor's fleet jobs into the real store."""

    def __init__(self, tmp_path: Path, rule: MaintenanceRule = WEEKLY) -> None:
        clock = FakeClock()
        self.store = Store(tmp_path / "state", clock)
        keepers = Keepers(None, None, None, self.store, None, None, None, None, None)  # type: ignore[arg-type]
        self.jobs = FleetJobs(Records(self.store, clock), None, None, keepers)  # type: ignore[arg-type]
        self.fleet = restore_maintenance(self.store, FleetState())
        self.rule = rule

    def tick(self, now: float) -> list[FleetAction]:
        self.fleet, actions = maintenance.tick(self.fleet, now, {}, self.rule)
        for action in actions:
            if isinstance(action, SaveMaintenance):
                self.jobs.run(action)
        return actions

    def status(self) -> dict[str, object]:
        return maintenance.status(self.fleet, self.rule)


def _fires(actions: list[FleetAction], name: str) -> list[object]:
    return [a.fields["fire"] for a in actions if isinstance(a, Record) and a.name == name]


def test_default_cron_fires_on_sunday_not_monday(tmp_path: Path) -> None:
    """'0 4 * * 0' is Sunday 04:00 (APScheduler's from_crontab would say Monday); status shows it so."""
    run = Run(tmp_path)
    actions = run.tick(at("2026-12-02 10:00"))  # a Wednesday, first run ever
    assert _fires(actions, "maintenance.due") == []
    assert run.fleet.maintenance == MaintenanceDuty()
    assert run.fleet.maint_next == at("2026-12-06 04:00")
    st = run.status()
    assert st["next_local"] == "Sun 2026-12-06 04:00 CET"
    assert st["next"] == "2026-12-06T04:00:00+01:00"
    assert st["timezone"] == "Europe/Berlin"
    assert st["enabled"] is True


def test_fire_is_due_once_at_its_time(tmp_path: Path) -> None:
    """Nothing before the fire, a run at it, nothing right after; the next fire is a week later."""
    run = Run(tmp_path)
    run.tick(at("2026-12-05 12:00"))
    assert _fires(run.tick(at("2026-12-06 03:59")), "maintenance.due") == []
    assert _fires(run.tick(at("2026-12-06 04:00") + 0.4), "maintenance.due") == [at("2026-12-06 04:00")]
    assert _fires(run.tick(at("2026-12-06 04:00") + 1.4), "maintenance.due") == []
    assert run.fleet.maint_next == at("2026-12-13 04:00")


def _restart(tmp_path: Path, down_at: str, catch_up_s: float = 21600) -> Run:
    """A run whose last evaluation (written by an earlier daemon's first tick) is ``down_at``."""
    rule = MaintenanceRule(WEEKLY.schedule, catch_up_s, WEEKLY.cron, WEEKLY.timezone)
    Run(tmp_path, rule).tick(at(down_at))
    return Run(tmp_path, rule)


def test_a_fire_missed_while_down_runs_once_at_start_within_catch_up(tmp_path: Path) -> None:
    """Down from Saturday 12:00, back Sunday 07:00: the 04:00 fire runs now (3 h late <= 6 h)."""
    actions = _restart(tmp_path, "2026-12-05 12:00").tick(at("2026-12-06 07:00"))
    assert _fires(actions, "maintenance.due") == [at("2026-12-06 04:00")]
    assert _fires(actions, "maintenance.missed") == []


def test_a_fire_older_than_catch_up_is_missed(tmp_path: Path) -> None:
    """Back Sunday 11:00 (7 h late > 6 h): recorded as missed, not run; the next run is a week later."""
    run = _restart(tmp_path, "2026-12-05 12:00")
    actions = run.tick(at("2026-12-06 11:00"))
    assert _fires(actions, "maintenance.due") == []
    assert _fires(actions, "maintenance.missed") == [at("2026-12-06 04:00")]
    assert run.status()["next_local"] == "Sun 2026-12-13 04:00 CET"


def test_the_state_file_is_written_at_start_at_fires_and_at_turns_only(tmp_path: Path) -> None:
    """A plain tick writes nothing (same inode, the file is replaced on each write); a fire does."""
    run = Run(tmp_path)
    path = tmp_path / "state" / MAINTENANCE_FILE
    run.tick(at("2026-12-05 12:00"))
    assert json.loads(path.read_text())["last_evaluated"] == at("2026-12-05 12:00")
    assert path.stat().st_mode & 0o777 == 0o600
    inode = path.stat().st_ino
    t = at("2026-12-05 12:00")
    for _ in range(600):  # ten minutes of ticks
        t += 1.0
        run.tick(t)
    assert path.stat().st_ino == inode
    run.tick(at("2026-12-06 04:00"))
    saved = json.loads(path.read_text())
    assert saved["last_evaluated"] == at("2026-12-06 04:00")
    assert MaintenanceDuty.from_dict(saved["duty"]) == run.fleet.maintenance
    assert path.stat().st_ino != inode


def test_a_corrupt_state_file_is_a_first_run(tmp_path: Path) -> None:
    """Garbage in maintenance.json: moved aside, nothing caught up, the daemon goes on."""
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / MAINTENANCE_FILE).write_text("{not json")
    run = Run(tmp_path)
    actions = run.tick(at("2026-12-06 07:00"))
    assert _fires(actions, "maintenance.due") + _fires(actions, "maintenance.missed") == []
    assert run.fleet.maintenance == MaintenanceDuty()
    assert any(n.startswith(MAINTENANCE_FILE + ".corrupt-") for n in os.listdir(tmp_path / "state"))


def test_disabled_maintenance_never_fires_nor_writes(tmp_path: Path) -> None:
    """maintenance.enabled false: no verdict, no next time, no state file."""
    run = Run(tmp_path, MaintenanceRule(None, 21600.0, "0 4 * * 0", None))
    run.tick(at("2026-12-06 03:00"))
    assert _fires(run.tick(at("2026-12-06 05:00")), "maintenance.due") == []
    assert run.status()["next"] is None
    assert not (tmp_path / "state" / MAINTENANCE_FILE).exists()


def test_policy_takes_the_maintenance_drain_bound_from_the_daemon_config(tmp_path: Path) -> None:
    """Parsed config: maintenance drains use maintenance.drain_timeout_s, restarts stop.drain_timeout_s."""
    spec = ProfileSpec(name="p", container="unused-c", api_key=False, drain_timeout_s=45.0)
    prof = write_profile(tmp_path, spec, "t")
    cfg = load_config(write_daemon_config(tmp_path, [prof], extra={"maintenance": {"drain_timeout_s": 123}}))
    p = policy_for(cfg.profiles[0], cfg)
    assert (p.drain_s(True), p.drain_s(False)) == (123.0, 45.0)

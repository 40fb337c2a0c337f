"""The daemon's maintenance clock on a real state directory: crontab weekdays, catch-up, few writes."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from supervisor.adapters.store.state import MAINTENANCE_FILE, Store
from supervisor.config import MaintenanceConfig, load_config
from supervisor.core.clock import FakeClock
from supervisor.core.maintenance.duty import MaintenanceDuty
from supervisor.daemon.build import policy_for
from supervisor.daemon.duties.maintenance import MaintenanceClock
from tests.daemon_harness import ProfileSpec, write_daemon_config, write_profile

BERLIN = ZoneInfo("Europe/Berlin")
WEEKLY = MaintenanceConfig(cron="0 4 * * 0", timezone="Europe/Berlin")


def at(text: str) -> float:
    """Epoch of a Berlin wall time 'YYYY-MM-DD HH:MM'."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=BERLIN).timestamp()


def clock(tmp_path: Path, cfg: MaintenanceConfig = WEEKLY) -> MaintenanceClock:
    return MaintenanceClock(cfg, Store(tmp_path / "state", FakeClock()))


def test_default_cron_fires_on_sunday_not_monday(tmp_path: Path) -> None:
    """'0 4 * * 0' is Sunday 04:00 (APScheduler's from_crontab would say Monday); status shows it so."""
    c = clock(tmp_path)
    plan, duty = c.start(at("2026-12-02 10:00"))  # a Wednesday, first run ever
    assert plan.kind == "nothing"
    assert duty == MaintenanceDuty()
    assert c.next_fire == at("2026-12-06 04:00")
    st = c.status()
    assert st["next_local"] == "Sun 2026-12-06 04:00 CET"
    assert st["next"] == "2026-12-06T04:00:00+01:00"
    assert st["timezone"] == "Europe/Berlin"
    assert st["enabled"] is True


def test_fire_is_due_once_at_its_time(tmp_path: Path) -> None:
    """poll says nothing before the fire, 'run' at it, nothing right after; next is a week later."""
    c = clock(tmp_path)
    c.start(at("2026-12-05 12:00"))
    assert c.poll(at("2026-12-06 03:59")).kind == "nothing"
    plan = c.poll(at("2026-12-06 04:00") + 0.4)
    assert plan.run == at("2026-12-06 04:00")
    assert c.poll(at("2026-12-06 04:00") + 1.4).kind == "nothing"
    assert c.next_fire == at("2026-12-13 04:00")


def _restart(tmp_path: Path, down_at: str, catch_up_s: float = 21600) -> MaintenanceClock:
    """A clock whose last evaluation (written by an earlier daemon) is `down_at`."""
    cfg = MaintenanceConfig(cron="0 4 * * 0", timezone="Europe/Berlin", catch_up_s=catch_up_s)
    first = clock(tmp_path, cfg)
    first.start(at(down_at))
    first.keep(MaintenanceDuty())  # the loop's step after start writes the evaluation
    return clock(tmp_path, cfg)


def test_a_fire_missed_while_down_runs_once_at_start_within_catch_up(tmp_path: Path) -> None:
    """Down from Saturday 12:00, back Sunday 07:00: the 04:00 fire runs now (3 h late <= 6 h)."""
    c = _restart(tmp_path, "2026-12-05 12:00")
    plan, _ = c.start(at("2026-12-06 07:00"))
    assert plan.run == at("2026-12-06 04:00")
    assert plan.missed == ()


def test_a_fire_older_than_catch_up_is_missed(tmp_path: Path) -> None:
    """Back Sunday 11:00 (7 h late > 6 h): recorded as missed, not run; the next run is a week later."""
    c = _restart(tmp_path, "2026-12-05 12:00")
    plan, _ = c.start(at("2026-12-06 11:00"))
    assert plan.run is None
    assert plan.missed == (at("2026-12-06 04:00"),)
    assert c.status()["next_local"] == "Sun 2026-12-13 04:00 CET"


def test_the_state_file_is_written_at_start_at_fires_and_at_turns_only(tmp_path: Path) -> None:
    """A plain tick writes nothing (same inode, the file is replaced on each write); a fire does."""
    c = clock(tmp_path)
    path = tmp_path / "state" / MAINTENANCE_FILE
    c.start(at("2026-12-05 12:00"))
    assert not path.exists()  # written by keep(), together with the round the loop decided
    c.keep(MaintenanceDuty())
    assert json.loads(path.read_text())["last_evaluated"] == at("2026-12-05 12:00")
    assert path.stat().st_mode & 0o777 == 0o600
    inode = path.stat().st_ino
    t = at("2026-12-05 12:00")
    for _ in range(600):  # ten minutes of ticks
        t += 1.0
        c.poll(t)
        c.keep(MaintenanceDuty())
    assert path.stat().st_ino == inode
    c.poll(at("2026-12-06 04:00"))
    held = MaintenanceDuty(fire=at("2026-12-06 04:00"), held_since=at("2026-12-06 04:00"))
    c.keep(held)
    saved = json.loads(path.read_text())
    assert saved["last_evaluated"] == at("2026-12-06 04:00")
    assert MaintenanceDuty.from_dict(saved["duty"]) == held
    assert path.stat().st_ino != inode


def test_a_corrupt_state_file_is_a_first_run(tmp_path: Path) -> None:
    """Garbage in maintenance.json: moved aside, nothing caught up, the daemon goes on."""
    (tmp_path / "state").mkdir(mode=0o700)
    path = tmp_path / "state" / MAINTENANCE_FILE
    path.write_text("{not json")
    c = clock(tmp_path)
    plan, duty = c.start(at("2026-12-06 07:00"))
    assert plan.kind == "nothing"
    assert duty == MaintenanceDuty()
    assert any(n.startswith(MAINTENANCE_FILE + ".corrupt-") for n in os.listdir(tmp_path / "state"))


def test_disabled_maintenance_never_fires_nor_writes(tmp_path: Path) -> None:
    """maintenance.enabled false: no verdict, no next time, no state file."""
    c = clock(tmp_path, MaintenanceConfig(enabled=False))
    c.start(at("2026-12-06 03:00"))
    assert c.poll(at("2026-12-06 05:00")).kind == "nothing"
    c.keep(MaintenanceDuty())
    assert c.status()["next"] is None
    assert not (tmp_path / "state" / MAINTENANCE_FILE).exists()


def test_policy_takes_the_maintenance_drain_bound_from_the_daemon_config(tmp_path: Path) -> None:
    """Parsed config: maintenance drains use maintenance.drain_timeout_s, restarts stop.drain_timeout_s."""
    spec = ProfileSpec(name="p", container="unused-c", api_key=False, drain_timeout_s=45.0)
    prof = write_profile(tmp_path, spec, "t")
    cfg = load_config(write_daemon_config(tmp_path, [prof], extra={"maintenance": {"drain_timeout_s": 123}}))
    p = policy_for(cfg.profiles[0], cfg)
    assert (p.drain_s(True), p.drain_s(False)) == (123.0, 45.0)

"""The real daemon (a subprocess) runs its maintenance from the cron schedule, not from ``maintenance --now``.

The cron names a wall-clock minute computed here in the host's zone (the daemon's default), so the test
waits for a real scheduled fire (at most ~105 s). Two simulator profiles are maintained one after the
other; the info alerts reach a local webhook receiver. The catch-up tests write the state file as a
daemon that was down over a fire would have left it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Resources
from tests.daemon_harness import DaemonProc, ProfileSpec, write_daemon_config, write_profile
from tests.harness import WebhookReceiver, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KV = {"a": 1_013_816, "b": 557_599}


class Fleet:
    """Two simulator profiles and one daemon over them (killed, containers removed, at the end)."""

    def __init__(self, tmp: Path, res: Resources) -> None:
        self.tmp = tmp
        self.res = res
        self.daemon: DaemonProc | None = None

    def start(
        self, maintenance: dict[str, Any], extra: dict[str, Any] | None = None, idle: bool = False
    ) -> DaemonProc:
        """The daemon over profiles a and b (and, with `idle`, c: never started, so not serving)."""
        specs = [
            ProfileSpec(name=n, container=self.res.name(n), env={"VSIM_KV_TOKENS": str(KV[n])}) for n in KV
        ]
        if idle:
            specs.append(ProfileSpec(name="c", container=self.res.name("c"), extra={"autostart": False}))
        paths = [write_profile(self.tmp, s, self.res.test_id) for s in specs]
        config = write_daemon_config(self.tmp, paths, extra={"maintenance": maintenance, **(extra or {})})
        self.daemon = DaemonProc(config, self.tmp)
        self.daemon.start()
        return self.daemon

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.close()


@pytest.fixture
def fleet(tmp_path: Path, resources: Resources, sim_image: str) -> Iterator[Fleet]:
    f = Fleet(tmp_path, resources)
    try:
        yield f
    finally:
        f.close()


def cron_at(when: datetime) -> str:
    """A crontab line firing once at the wall-clock minute of `when` (host zone): minute hour day month."""
    return f"{when.minute} {when.hour} {when.day} {when.month} *"


def minute_after(seconds: float) -> datetime:
    """The first whole minute at least `seconds` from now, in the host's zone."""
    t = datetime.now().astimezone() + timedelta(seconds=seconds)
    return (t + timedelta(minutes=1)).replace(second=0, microsecond=0)


def minute_before(seconds: float) -> datetime:
    """The last whole minute at least `seconds` ago, in the host's zone."""
    return (datetime.now().astimezone() - timedelta(seconds=seconds)).replace(second=0, microsecond=0)


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e["name"] == name]


def changes(events: list[dict[str, Any]], profile: str) -> list[tuple[float, str]]:
    return [(e["ts"], e["fields"]["new"]) for e in named(events, "state.changed") if e["profile"] == profile]


def assert_one_after_the_other(events: list[dict[str, Any]]) -> None:
    """a went MAINTENANCE -> ... -> RUNNING, and only then did b's drain (MAINTENANCE) begin."""
    a, b = changes(events, "a"), changes(events, "b")
    a_drain = next(ts for ts, st in a if st == "MAINTENANCE")
    a_back = next(ts for ts, st in a if st == "RUNNING" and ts > a_drain)
    b_drain = next(ts for ts, st in b if st == "MAINTENANCE")
    assert a_drain < a_back <= b_drain, (a, b)
    assert any(st == "RUNNING" and ts > b_drain for ts, st in b), b


def round_completed(d: DaemonProc, timeout: float) -> dict[str, Any]:
    found = wait_for(
        lambda: named(d.events(n=1000), "maintenance.round_completed"),
        timeout,
        interval=1.0,
        message="maintenance.round_completed",
    )
    return dict(found[0])


def test_a_scheduled_fire_maintains_both_profiles_one_after_the_other(
    fleet: Fleet, webhook: WebhookReceiver
) -> None:
    """A real cron fire: a then b in turn, stopped c skipped (warning), KV info alerts reach a webhook."""
    fire = minute_after(40)
    alerts = {"channels": [{"kind": "generic", "name": "ops", "url": f"{webhook.url}/alert/T"}]}
    d = fleet.start({"enabled": True, "cron": cron_at(fire)}, {"alerts": alerts}, idle=True)
    for name in KV:
        st = d.wait_state(name, "RUNNING", 60)
        assert st["next_maintenance_local"].startswith(fire.strftime("%a %Y-%m-%d %H:%M"))
        assert datetime.fromisoformat(st["next_maintenance"]).timestamp() == fire.timestamp()
    before = {n: d.status(n)["container_id"] for n in KV}
    done = round_completed(d, fire.timestamp() - time.time() + 90)
    assert done["fields"]["done"] == ["a", "b"]
    assert done["fields"]["skipped"] == ["c"]
    events = d.events(n=1000)
    [due] = named(events, "maintenance.due")
    assert due["fields"]["fire"] == fire.timestamp()
    assert due["ts"] >= fire.timestamp()
    [skipped] = named(events, "maintenance.skipped")
    assert (skipped["profile"], skipped["fields"]["state"]) == ("c", "STOPPED")
    assert_one_after_the_other(events)
    for name in KV:
        assert d.status(name)["container_id"] != before[name]  # really restarted

    def maintenance_alerts() -> list[dict[str, Any]] | None:
        bodies = [r.json() for r in webhook.received() if r.path.startswith("/alert/")]
        found = [b for b in bodies if b["title"].startswith("maintenance")]
        return found if len(found) >= 3 else None

    alerted = wait_for(maintenance_alerts, 20, message="two 'maintenance done' and one 'skipped' alert")
    bodies = [b for b in alerted if b["title"].startswith("maintenance done")]
    warned = [b for b in alerted if b["title"].startswith("maintenance skipped")]
    assert [(b["profile"], b["severity"]) for b in warned] == [("c", "warning")]
    titles = {b["profile"]: (b["severity"], b["title"]) for b in bodies}
    assert titles == {n: ("info", f"maintenance done: KV pool {KV[n]:,} -> {KV[n]:,} tokens") for n in KV}


def _state_file(tmp: Path, last_evaluated: float) -> None:
    state = tmp / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    path = state / "maintenance.json"
    path.write_text(json.dumps({"last_evaluated": last_evaluated, "duty": None}), encoding="utf-8")
    path.chmod(0o600)


def test_a_fire_missed_while_down_runs_once_at_start(fleet: Fleet) -> None:
    """The state file says 'last evaluated 10 min ago'; a fire 2 min ago was missed: it runs once now."""
    fire = minute_before(120)
    _state_file(fleet.tmp, time.time() - 600)
    d = fleet.start({"enabled": True, "cron": cron_at(fire)})
    done = round_completed(d, 120)
    assert done["fields"]["done"] == ["a", "b"]
    events = d.events(n=1000)
    [due] = named(events, "maintenance.due")
    assert due["fields"]["fire"] == fire.timestamp()
    assert due["fields"]["late_s"] >= 120
    assert_one_after_the_other(events)
    saved = json.loads((fleet.tmp / "state" / "maintenance.json").read_text(encoding="utf-8"))
    assert saved["last_evaluated"] > fire.timestamp()
    assert not saved["duty"]["round"]["active"]


def test_a_fire_older_than_catch_up_is_recorded_as_missed(fleet: Fleet) -> None:
    """catch_up_s 60 and a fire 3 min ago: one maintenance.missed event, no restart."""
    fire = minute_before(180)
    _state_file(fleet.tmp, time.time() - 900)
    d = fleet.start({"enabled": True, "cron": cron_at(fire), "catch_up_s": 60})
    missed = wait_for(lambda: named(d.events(), "maintenance.missed"), 20, message="maintenance.missed")
    assert [e["fields"]["fire"] for e in missed] == [fire.timestamp()]
    assert missed[0]["profile"] == ""
    for name in KV:
        d.wait_state(name, "RUNNING", 60)
    events = d.events(n=1000)
    assert not named(events, "maintenance.due")
    assert all(st != "MAINTENANCE" for n in KV for _, st in changes(events, n))

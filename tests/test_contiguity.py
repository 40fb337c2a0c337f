"""The contiguity sentinel (core/host/contiguity.py, docs/wedge.md): recorded /proc/buddyinfo files drive the
warning through the daemon's host-memory sampler (the reader takes a path); plain values for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.core import Metric

from supervisor.adapters.host.buddyinfo import BUDDYINFO_ENV, buddyinfo_path, read_contiguity
from supervisor.adapters.metrics.host import contiguity_gauges
from supervisor.core.events import PreflightDone
from supervisor.core.fleet.actions import Raise
from supervisor.core.fleet.events import ContiguitySampled
from supervisor.core.fleet.policy import FleetPolicy
from supervisor.core.fleet.state import FleetState
from supervisor.core.fleet.step import step as fleet_step
from supervisor.core.host.contiguity import ContiguityWatch, contiguity_alert, measure, parse_buddyinfo
from supervisor.core.states import State
from tests.test_machine_driver import Driver, fresh_boot, policy

BUDDY = Path(__file__).parent / "fixtures" / "buddyinfo"
PAGE = 4096


def test_recorded_files_measure_as_their_readme_says() -> None:
    """Free memory in blocks of 4 MiB or more, in 4 MiB blocks: 900 on the development box, 12 hours after a
    GB10 restart, 0 after days (with ~113 GiB free in smaller blocks); the order of 4 MiB follows the page."""
    got = {}
    for name in ("x86-2core-healthy.txt", "gb10-hours-after-restart.txt", "gb10-days-fragmented.txt"):
        c = read_contiguity(BUDDY / name, PAGE)
        assert c is not None
        got[name] = c.free_blocks
    assert got == {
        "x86-2core-healthy.txt": 900,
        "gb10-hours-after-restart.txt": 12,
        "gb10-days-fragmented.txt": 0,
    }
    days = read_contiguity(BUDDY / "gb10-days-fragmented.txt", PAGE)
    assert days is not None
    assert days.largest_bytes == 1 << 20
    zones = parse_buddyinfo("Node 0, zone   Normal   0 0 0 0 0 0 3 1\nbad line\n")
    assert measure(zones, 64 * 1024).free_blocks == 3 + 2  # 64 KiB pages: order 6 is 4 MiB, order 7 two
    assert read_contiguity(BUDDY / "missing.txt") is None


def test_the_test_seam_reads_the_named_file_instead_of_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """``VSUP_BUDDYINFO`` (the adapter's test seam: a bench row cannot fragment the host) is what a read
    without a path measures; unset, the read is the host's own /proc/buddyinfo."""
    monkeypatch.setenv(BUDDYINFO_ENV, str(BUDDY / "gb10-hours-after-restart.txt"))
    seam = read_contiguity(page=PAGE)
    assert seam is not None
    assert seam.free_blocks == 12
    monkeypatch.delenv(BUDDYINFO_ENV)
    assert buddyinfo_path() == Path("/proc/buddyinfo")


def test_the_fleet_step_warns_and_resolves_from_recorded_buddyinfo_files() -> None:
    """The reader on recorded files, through the fleet step: healthy (first sample: ok, resolving what an
    earlier daemon may have raised), the GB10 file hours after a restart (contiguity.low, once), the days-old
    fragmented one (still low: nothing new), healthy again (contiguity.ok); the status figures follow."""
    fleet, policy, kinds = FleetState(), FleetPolicy(contiguity_min_free_blocks=256), []
    for name in (
        "x86-2core-healthy.txt",
        "gb10-hours-after-restart.txt",
        "gb10-days-fragmented.txt",
        "x86-2core-healthy.txt",
    ):
        c = read_contiguity(BUDDY / name, PAGE)
        assert c is not None
        fleet, actions = fleet_step(fleet, ContiguitySampled(c), 0.0, {}, policy)
        kinds.append([a.alert.kind for a in actions if isinstance(a, Raise)])
        if name.startswith("gb10-hours"):
            shown = fleet.host["contiguity"]
            assert (shown["free_4mib_blocks"], shown["threshold"], shown["low"]) == (12, 256, True)
    assert kinds == [["contiguity.ok"], ["contiguity.low"], [], ["contiguity.ok"]]
    assert fleet.host["contiguity"]["low"] is False


def test_the_warning_says_reboot_and_the_resolve_is_info() -> None:
    """contiguity.low: a warning with the figures and the field's advice; contiguity.ok resolves it."""
    c = read_contiguity(BUDDY / "gb10-hours-after-restart.txt", PAGE)
    assert c is not None
    low = contiguity_alert("low", c, 256)
    assert (low.severity, low.kind) == ("warning", "contiguity.low")
    assert "12 x 4 MiB" in low.reason
    assert "does not give the blocks back; a reboot does: schedule one" in low.reason
    ok = contiguity_alert("ok", c, 256)
    assert (ok.severity, ok.kind) == ("info", "contiguity.ok")
    assert ContiguityWatch(0).observe(c) == (ContiguityWatch(0), None)  # off


def test_a_start_on_a_host_below_the_threshold_says_so() -> None:
    """PreflightDone with 12 free 4 MiB blocks: the start goes on (WAITING) with a start.contiguity_low
    event and a contiguity.start warning naming the reboot; with 899 nothing is said."""
    d = Driver(policy=policy(host={"contiguity_min_free_blocks": 256}))
    fresh_boot(d)
    from supervisor.core.events import StartRequested

    d.send(StartRequested())
    acts = d.send(PreflightDone(True, "", 50.0, 12))
    assert d.st() == State.WAITING
    assert "start.contiguity_low" in d.emits(acts)
    (alert,) = [a for a in d.alerts(acts) if a.kind == "contiguity.start"]
    assert "a reboot does" in alert.reason
    e = Driver(policy=policy(host={"contiguity_min_free_blocks": 256}))
    fresh_boot(e)
    e.send(StartRequested())
    assert "start.contiguity_low" not in e.emits(e.send(PreflightDone(True, "", 50.0, 899)))


def test_the_prometheus_gauges_come_from_the_status_document() -> None:
    """The free blocks, the threshold, the low flag and every node/zone/order count."""
    c = read_contiguity(BUDDY / "gb10-days-fragmented.txt", PAGE)
    assert c is not None
    daemon = {"host": {"contiguity": {**c.to_dict(), "threshold": 256, "low": True}}}
    metrics: dict[str, Metric] = {m.name: m for m in contiguity_gauges(daemon)}
    assert metrics["vllm_supervisor_host_free_4mib_blocks"].samples[0].value == 0
    assert metrics["vllm_supervisor_host_contiguity_low"].samples[0].value == 1
    orders = metrics["vllm_supervisor_host_buddy_free_blocks"].samples
    assert len(orders) == 22
    assert [s.value for s in orders if s.labels["zone"] == "Normal" and s.labels["order"] == "8"] == [52000]
    assert list(contiguity_gauges({})) == []

"""Wedge insurance (docs/wedge.md): the hardware-watchdog verdict (plain values), the systemd drop-in that
``init --hardware-watchdog`` writes and ``uninit`` removes (real files in a temporary directory, through the
real CLI), and the morning-after note after a watchdog reset (a recorded /sys/class/watchdog tree)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from supervisor.adapters.host.watchdog import _parse_timespan, devices
from supervisor.core.host.watchdog import DROPIN_NAME, WatchdogFacts, reset_by_watchdog, verdict
from supervisor.offline.watchdog import install, remove

TEGRA = (("watchdog0", "tegra_wdt", 0),)


def test_the_verdict_says_whether_a_wedged_host_resets_itself() -> None:
    assert verdict(WatchdogFacts(60_000_000, TEGRA)) == (
        True,
        "hardware watchdog: armed by systemd (RuntimeWatchdogSec 60 s, /dev/watchdog0 (tegra_wdt)): "
        "a wedged host resets itself",
    )
    off = verdict(WatchdogFacts(0, TEGRA))
    assert off[0] is False
    assert "init --hardware-watchdog 60" in off[1]
    assert verdict(WatchdogFacts(None, ()))[1].startswith("hardware watchdog: none on this host")
    assert _parse_timespan("1min 30s") == 90_000_000
    assert _parse_timespan("bogus") is None


def test_the_drop_in_is_idempotent_refuses_a_stranger_and_uninit_removes_it(tmp_path: Path) -> None:
    said: list[str] = []
    no_systemd = ("false",)  # systemctl daemon-reexec stands in: it fails, the drop-in waits for a boot
    assert install(60, said.append, tmp_path, no_systemd) == 0
    path = tmp_path / DROPIN_NAME
    assert "RuntimeWatchdogSec=60s" in path.read_text()
    assert any("applies at the next boot" in s for s in said)
    assert install(60, said.append, tmp_path, no_systemd) == 0
    assert said[-1].endswith("unchanged (RuntimeWatchdogSec=60s)")
    assert install(120, said.append, tmp_path, no_systemd) == 0  # ours: replaced
    assert "RuntimeWatchdogSec=120s" in path.read_text()
    assert install(5, said.append, tmp_path, no_systemd) == 2  # out of range
    assert remove(said.append, tmp_path, no_systemd) == 0
    assert not path.exists()
    path.write_text("[Manager]\nRuntimeWatchdogSec=30s\n")  # the admin's own
    assert install(60, said.append, tmp_path, no_systemd) == 1
    assert remove(said.append, tmp_path, no_systemd) == 0
    assert path.read_text() == "[Manager]\nRuntimeWatchdogSec=30s\n"


def test_uninit_through_the_cli_removes_the_drop_in(tmp_path: Path) -> None:
    """The real ``supervisorctl uninit`` (no unit installed here) removes our drop-in and keeps going."""
    conf = tmp_path / "conf"
    install(60, lambda s: None, conf, ("false",))
    argv = [sys.executable, "-m", "supervisor.cli", "uninit", "--etc", str(tmp_path / "etc")]
    argv += ["--unit-dir", str(tmp_path / "units"), "--systemd-conf-dir", str(conf)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert f"removing {conf / DROPIN_NAME}" in proc.stdout, proc.stdout + proc.stderr
    assert not (conf / DROPIN_NAME).exists()


def test_a_watchdog_reset_is_named_the_morning_after(tmp_path: Path) -> None:
    """bootstatus with WDIOF_CARDRESET (0x20): the note names the device; 0: nothing."""
    wd = tmp_path / "watchdog0"
    wd.mkdir()
    (wd / "identity").write_text("tegra_wdt\n")
    (wd / "bootstatus").write_text("32\n")
    assert devices(tmp_path) == (("watchdog0", "tegra_wdt", 32),)
    assert reset_by_watchdog(devices(tmp_path)) == (
        "the hardware watchdog reset the host (/dev/watchdog0 bootstatus: card reset)"
    )
    (wd / "bootstatus").write_text("0\n")
    assert reset_by_watchdog(devices(tmp_path)) is None
    assert devices(tmp_path / "absent") == ()

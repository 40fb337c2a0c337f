"""The bash supervisor suite init replaces (supervise.sh): found in units and cron lines, disabled with a
message, given back by uninit. A temporary directory stands in for / (cron lines are edited there)."""

from __future__ import annotations

from pathlib import Path

from supervisor.offline.bash_suite import MARK, RECORD, Finding, disable, find, restore, scan

UNIT = "[Service]\nExecStart=/bin/bash /home/alice/Qwen3.8-Flash-Next-Single-DGX-Spark/supervise.sh\n"
CRON = "# m h dom mon dow command\n*/1 * * * * alice /home/alice/suite/supervise.sh --once\n"


def test_units_and_cron_lines_running_supervise_sh_are_found() -> None:
    units = {
        "/etc/systemd/system/qwen-supervise.service": UNIT,
        "/etc/systemd/system/other.service": "[Service]\nExecStart=/usr/bin/supervisord\n",
        "/home/alice/.config/systemd/user/suite.service": UNIT,
    }
    crons = {"/etc/cron.d/qwen": CRON, "/etc/crontab": "# 0 4 * * 0 root supervise.sh (a comment)\n"}
    assert find(units, crons) == [
        Finding("unit", "/etc/systemd/system/qwen-supervise.service", UNIT.splitlines()[1]),
        Finding("user-unit", "/home/alice/.config/systemd/user/suite.service", UNIT.splitlines()[1], "alice"),
        Finding("cron", "/etc/cron.d/qwen", CRON.splitlines()[1]),
    ]
    assert find({"/etc/systemd/system/x.service": "ExecStart=/opt/not-supervise.shell\n"}, {}) == []


def test_a_cron_line_is_disabled_with_a_message_and_restored(tmp_path: Path) -> None:
    root, etc = tmp_path / "root", tmp_path / "etc"
    cron = root / "etc" / "cron.d" / "qwen"
    cron.parent.mkdir(parents=True)
    cron.write_text(CRON, encoding="utf-8")
    said: list[str] = []
    found = scan(root)
    assert [f.kind for f in found] == ["cron"]
    disable(found, etc, said.append)
    assert "docker rm -f" in said[0]
    assert cron.read_text(encoding="utf-8") == CRON.replace("*/1", MARK + "*/1")
    assert scan(root) == []  # a second init finds nothing to disable
    assert (etc / RECORD).exists()
    restore(etc, said.append)
    assert cron.read_text(encoding="utf-8") == CRON
    assert not (etc / RECORD).exists()
    restore(etc, said.append)  # nothing recorded: nothing happens
    assert cron.read_text(encoding="utf-8") == CRON

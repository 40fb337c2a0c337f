"""tools/installer.py: which installer a new venv gets, from pip's own settings (pure: no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import installer

STRATEGY = ["--index-strategy", "unsafe-best-match"]


def test_a_box_whose_pip_has_sources_of_its_own_keeps_pip() -> None:
    """uv reads no pip configuration: a mirror, constraints or an index keep pip (this box's pip.conf)."""
    this_box = {
        "cert": "/etc/ssl/certs/ca-certificates.crt",
        "constraint": "/etc/xdg/pip/constraints.txt",
        "extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "find-links": "/opt/wheels",
    }
    assert installer.uv_sources(this_box) is None
    assert installer.uv_sources({"index-url": "https://mirror.example/simple"}) is None
    assert installer.uv_sources({"no-index": "1", "find-links": "/w"}) is None
    assert installer.uv_sources({"some-future-setting": "x"}) is None  # unknown: pip, to be safe


def test_a_new_machine_gets_uv_with_its_find_links_and_the_extra_sources() -> None:
    assert installer.uv_sources({}) == STRATEGY
    new_machine = {
        "config-file": "/dev/null",
        "cert": "/c.pem",
        "default-timeout": "180",
        "find-links": "/w /x",
    }
    assert installer.uv_sources(new_machine, ["--extra-index-url", "https://i.example"]) == [
        "--find-links",
        "/w",
        "--find-links",
        "/x",
        "--extra-index-url",
        "https://i.example",
        *STRATEGY,
    ]
    assert installer.find_links(new_machine) == ["/w", "/x"]
    assert installer.find_links({}) == []


def test_the_command_refuses_what_is_not_a_venv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert installer.main(["installer"]) == 2
    assert installer.main(["installer", str(tmp_path), "-e", "."]) == 2
    assert "is not a venv" in capsys.readouterr().err

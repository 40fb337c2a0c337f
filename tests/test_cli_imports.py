"""``supervisorctl status`` starts fast: building the parser and answering ``status --json`` import no offline
tool, no YAML and no container-spec code (bench/bench_cli.py times it; this pins what it loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: Modules a daemon read command never needs (each cost milliseconds at every client start).
#: ``shutil`` is what argparse's help formatter imports for the terminal's width (with bz2 and lzma, ~3 ms).
HEAVY = (
    "yaml",
    "supervisor.offline",
    "supervisor.core.spec",
    "supervisor.config",
    "requests",
    "docker",
    "shutil",
    "typing",
    "dataclasses",
)

PROBE = """
import json, sys
from supervisor.cli.main import build_parser, main
build_parser()
code = main(["--socket", sys.argv[1], "status", "--json"])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def test_status_json_imports_no_offline_tool(tmp_path: Path) -> None:
    """A status call against no daemon (exit 4: unreachable) loads none of HEAVY."""
    argv = [sys.executable, "-c", PROBE, str(tmp_path / "none.sock")]
    out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["code"] == 4, out.stderr
    loaded = [m for m in doc["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []


def test_help_is_as_wide_as_the_terminal_says() -> None:
    """The parser finds the width itself, as argparse did with shutil: $COLUMNS, else 80 off a terminal."""

    def widest(env: dict[str, str]) -> int:
        argv = [sys.executable, "-m", "supervisor.cli", "--help"]
        out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60, env=env)
        return max(len(line) for line in out.stdout.splitlines())

    base = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    assert 40 < widest({**base, "COLUMNS": "60"}) <= 60
    assert 60 < widest(base) <= 80  # standard output is a pipe here: 80
    assert 80 < widest({**base, "COLUMNS": "200"}) <= 200

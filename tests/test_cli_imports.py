"""``supervisorctl status`` starts fast: building the parser and answering ``status --json`` import no offline
tool, no YAML and no container-spec code (bench/bench_cli.py times it; this pins what it loads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Modules a daemon read command never needs (each cost milliseconds at every client start).
HEAVY = ("yaml", "supervisor.offline", "supervisor.core.spec", "supervisor.config", "requests", "docker")

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

"""The shipped production daemon configs (supervisor/data/examples/{thor,spark}/, linked from profiles/)
pass check-config as installed.

Each example directory is laid out as /etc/vllm-supervisor is: ``daemon.yaml`` and ``profiles/NAME.yaml``;
the config names secret files under /etc/vllm-supervisor (``alerts/CHANNEL.url`` and ``.secret``,
``heartbeat.url``: the paths ``supervisorctl init`` writes). The tests copy the package's example into a
temporary /etc/vllm-supervisor, add the secret files, and run the real ``supervisorctl check-config``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import supervisor
from supervisor.config import load_config

PROFILES = Path(__file__).resolve().parent.parent / "profiles"
#: The examples as the package ships them (importlib.resources would find the same directory).
EXAMPLES = Path(supervisor.__file__).resolve().parent / "data" / "examples"
ETC = "/etc/vllm-supervisor"
CONFIGS = {"daemon.thor.yaml": "thor-t5000.yaml", "daemon.spark.yaml": "spark-gb10.yaml"}
BOXES = {"daemon.thor.yaml": "thor", "daemon.spark.yaml": "spark"}


def _check_config(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _install(tmp_path: Path, config: str, secret_mode: int = 0o600) -> Path:
    """Lay out ``config`` as <tmp>/daemon.yaml with its profile and every secret file it names."""
    example = EXAMPLES / BOXES[config]
    text = (example / "daemon.yaml").read_text(encoding="utf-8").replace(ETC, str(tmp_path))
    (tmp_path / "profiles").mkdir()
    shutil.copyfile(example / "profiles" / CONFIGS[config], tmp_path / "profiles" / CONFIGS[config])
    for name in sorted(set(re.findall(r"_file: " + re.escape(str(tmp_path)) + r"/([\w./-]+)", text))):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, secret_mode)
        with os.fdopen(fd, "w") as f:
            f.write("https://chat.invalid/placeholder\n")
        os.chmod(tmp_path / name, secret_mode)
    path = tmp_path / "daemon.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_production_config_passes_check_config(tmp_path: Path, config: str) -> None:
    """check-config prints OK for the installed layout with 0600 secret files, then whether a hardware
    watchdog will reset this host if it wedges (docs/wedge.md "Wedge insurance")."""
    path = _install(tmp_path, config)
    proc = _check_config(path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ok, watchdog = proc.stdout.strip().splitlines()
    assert ok == f"OK: daemon config {path} (1 profile)"
    assert watchdog.startswith("note: hardware watchdog: ")


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_production_config_values(tmp_path: Path, config: str) -> None:
    """The field-report values: drop caches level 1, the memory floors, Sunday 04:00, the unit's paths."""
    cfg = load_config(_install(tmp_path, config))
    assert (cfg.host.drop_caches, cfg.host.drop_caches_level) == (True, 1)
    guard = cfg.host.memory_guard
    assert (guard.enabled, guard.mem_available_min_gib, guard.samples) == (True, 6, 5)
    assert guard.sample_interval_s == 1
    assert (guard.memfree_min_gib, guard.memavailable_below_gib) == (2, 10)
    mt = cfg.maintenance
    assert (mt.enabled, mt.cron, mt.drain_timeout_s) == (True, "0 4 * * 0", 600)
    assert cfg.state_dir == Path("/var/lib/vllm-supervisor")
    assert cfg.socket_path == Path("/run/vllm-supervisor/control.sock")
    assert cfg.socket_path.parent == Path("/run/vllm-supervisor")
    assert cfg.alerts.channels
    assert cfg.heartbeat.url_file is not None
    assert all(c.url is None and c.url_file is not None for c in cfg.alerts.channels)
    assert [p.source.name for p in cfg.profiles] == [CONFIGS[config]]


def test_missing_or_open_secret_files_are_errors(tmp_path: Path) -> None:
    """As shipped (no /etc files here) every secret file is named; a 0644 one is refused too."""
    proc = _check_config(PROFILES / "daemon.thor.yaml")
    assert proc.returncode == 1
    for key in ("heartbeat.url_file", "alerts.channels[0].url_file", "alerts.channels[0].secret_file"):
        assert f"daemon.thor.yaml: {key}: " in proc.stdout, proc.stdout
    assert len(proc.stdout.splitlines()) == 3, proc.stdout  # the profile next to it is found
    path = _install(tmp_path, "daemon.thor.yaml", secret_mode=0o644)
    proc = _check_config(path)
    assert proc.returncode == 1
    assert "has mode 0644: it holds secrets and must be 0600 or stricter" in proc.stdout


def test_thor_bind_sources_are_outside_tmp() -> None:
    """/tmp is emptied at every boot, so no shipped profile bind-mounts from it."""
    for name in CONFIGS.values():
        lines = (PROFILES / name).read_text().splitlines()
        assert [m for m in lines if m.strip().startswith("- /tmp")] == [], name


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_production_profiles_define_smoke_gates(tmp_path: Path, config: str) -> None:
    """Both examples gate a start: degeneration, the known answer and the 15 tok/s floor fail it; Spark
    (reasoning and tool parsers set) also checks tool calls and leaked <think> markup."""
    [prof] = load_config(_install(tmp_path, config)).profiles
    gates = {g.kind: g for g in prof.smoke.gates}
    assert {k: gates[k].policy for k in ("degeneration", "contains", "decode_floor")} == dict.fromkeys(
        ("degeneration", "contains", "decode_floor"), "fail"
    )
    assert gates["decode_floor"].min_tokens_per_s == 15
    assert gates["contains"].substring == "Paris"
    spark = {"stream_usage", "degeneration", "contains", "tool_call", "think_leak", "decode_floor"}
    assert set(gates) == (spark if config == "daemon.spark.yaml" else spark - {"tool_call", "think_leak"})

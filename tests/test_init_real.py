"""``supervisorctl init`` / ``uninit`` of the package **installed from its wheel** under a real systemd (PID 1
of a container), on hand-run simulators started like field report 000's ``docker run`` (issue 38).

The box (tests/systemd_box.py): namespacing enforced, the wheel installed as docs/install.md says into
``/opt/vllm-supervisor/venv`` by root inside the box (no checkout, no host venv in it), every command run
from ``/``. Nothing is configured beforehand: the model container is started by a hand-typed ``docker run``
with ``--restart unless-stopped``, ``--api-key`` on its command line, a bind mount of a file under ``/tmp``
(the seed's ``/tmp/fixed_config.json``), two patched simulator files bind-mounted from ``/opt`` and
``/home``, a proxy URL with a password and a secret ``HF_TOKEN`` in its env, and hostile env values. Then
the installed ``supervisorctl init`` runs as root (the alert URL from a 0600 file, never argv), the
configuration directory is a host directory mounted at the same path in the box (``--etc``: the bind
sources init copies there must exist for the host's Docker too). The tests run in file order on one box.
Select with ``-m systemd_real``.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor.adapters.docker.adapter import DockerAdapter
from tests.harness import wait_for
from tests.systemd_box import (
    FIXED_JSON,
    HF_TOKEN,
    HOSTILE,
    KEY,
    PROXY,
    PROXY_PASSWORD,
    SUITE_CRON,
    UNIT,
    VENV,
    Box,
    http_status,
    init_box,
    run_sim,
)

pytestmark = [pytest.mark.systemd_real, pytest.mark.docker, pytest.mark.slow]


def _cmdlines() -> str:
    """Every process's command line on this host (the box's and the containers' processes included)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError):
                out.append((p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.fixture(scope="module")
def box(sim_image: str) -> Iterator[Box]:
    with init_box(sim_image) as b:
        yield b


def _init(box: Box, container: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return box.ctl(
        "init", container, "--etc", str(box.etc), "--generic", "/root/alert.url", "--wait", "180", *extra,
        check=False,
    )  # fmt: skip


def _copy(box: Box) -> Path:
    """Where init copies the /tmp bind source (the first one under /tmp: index 0)."""
    return box.etc / "profiles" / f"{box.model}.files" / f"0-{box.tmp_file.name}"


def _no_secret_in_readable_files(box: Box) -> None:
    for path in box.etc.rglob("*"):
        if path.is_file() and path.stat().st_mode & 0o044:
            text = path.read_bytes().decode("utf-8", "replace")
            for secret in (KEY, HF_TOKEN, PROXY_PASSWORD, box.receiver.url):
                assert secret not in text, (path, oct(path.stat().st_mode))


def test_dry_run_changes_nothing_and_prints_no_secret(box: Box) -> None:
    """init --dry-run prints every file and command, writes nothing, leaves the policy alone; no key, no
    proxy password, no --api-key planned; the /tmp source is planned into the config directory."""
    before = box.tree()
    proc = _init(box, box.model, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    for path in (
        f"{box.etc}/daemon.yaml",
        f"{box.etc}/profiles/{box.model}.yaml",
        f"/etc/systemd/system/{UNIT}",
    ):
        assert path in out
    assert "docker update --restart no" in out
    assert "box: other" in out
    for secret in (KEY, HF_TOKEN, PROXY_PASSWORD):
        assert secret not in out
    assert "inject_arg" not in out
    assert f"{box.model}.files/0-" in out
    assert "disable the bash supervisor suite: cron /etc/cron.d/qwen-suite" in out
    assert box.tree() == before
    assert box.inspect(box.model)["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    status = DockerAdapter().status(box.model)
    assert status is not None
    assert status.restart_policy == "unless-stopped"


def test_init_adopts_the_same_container_with_maintenance_and_no_readable_secret(box: Box) -> None:
    """init: the unit active, the same container RUNNING, restart policy no, maintenance on, alerts in
    zh-TW (from LANG), the test alert in; no secret in any group/world-readable file or in the output."""
    cid = box.inspect(box.model)["Id"]
    proc = _init(box, box.model)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for secret in (KEY, HF_TOKEN, PROXY_PASSWORD):
        assert secret not in out
    assert box.show("ActiveState") == "active"
    assert box.sh("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    unit = box.sh("cat", f"/etc/systemd/system/{UNIT}").stdout
    assert f"ExecStart={VENV}/bin/vllm-supervisor --config {box.etc}/daemon.yaml\n" in unit
    assert "PYTHONPATH" not in unit
    daemon = box.sh("cat", f"/proc/{box.show('MainPID')}/cmdline").stdout.split("\0")
    assert daemon[0].startswith(f"{VENV}/bin/python"), daemon
    assert daemon[1] == f"{VENV}/bin/vllm-supervisor", daemon
    st = box.wait_running(box.model)
    assert st["container_id"] == cid
    assert st["next_maintenance"] is not None  # the weekly restart is scheduled
    assert box.inspect(box.model)["HostConfig"]["RestartPolicy"]["Name"] == "no"
    config = yaml.safe_load((box.etc / "daemon.yaml").read_text(encoding="utf-8"))
    assert config["maintenance"] == {"enabled": True, "cron": "0 4 * * 0", "drain_timeout_s": 600}
    assert config["alerts"]["language"] == "zh-TW"
    titles = [r.json().get("title") for r in box.receiver.received() if r.body]
    assert "test alert" in titles
    assert "docker rm -f" in out  # the bash suite was found and disabled, saying why
    assert (
        box.sh("cat", "/etc/cron.d/qwen-suite").stdout == f"#disabled-by-vllm-supervisor-init# {SUITE_CRON}\n"
    )
    _no_secret_in_readable_files(box)
    key_file = box.etc / "profiles" / "secrets" / f"{box.model}.key"
    assert key_file.read_text(encoding="utf-8").strip() == KEY
    assert key_file.stat().st_mode & 0o777 == 0o600
    env_file = box.etc / "profiles" / f"{box.model}.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    env_text = env_file.read_text(encoding="utf-8")
    assert f"HF_TOKEN={HF_TOKEN}\n" in env_text
    assert f"HTTPS_PROXY={PROXY}\n" in env_text
    doc = yaml.safe_load((box.etc / "profiles" / f"{box.model}.yaml").read_text(encoding="utf-8"))
    assert doc["container"]["env"] == HOSTILE | {"VSIM_LOAD_SECONDS": "1"}
    assert doc["api_key"] == {"file": f"secrets/{box.model}.key", "inject_env": "VLLM_API_KEY"}
    assert "--api-key" not in doc["container"]["command"]
    copy = _copy(box)
    [mount] = [m for m in doc["container"]["mounts"] if m["target"] == "/models/config.json"]
    assert (mount["source"], mount["read_only"]) == (str(copy), True)
    assert copy.read_text(encoding="utf-8") == FIXED_JSON


def test_the_unit_namespacing_leaves_tmp_and_rollback_targets_to_the_daemon(box: Box) -> None:
    """Under the shipped unit (namespacing enforced here): the daemon sees the host's /tmp (a /tmp-mounted
    profile's preflight finds its file), can write /opt and /home (a patch rollback restores files there)
    and its profiles directory, and cannot write /usr or /etc/systemd (the hardening is on)."""
    assert box.in_daemon_ns(f"test -r $R{box.tmp_file}") == 0
    for where in ("/opt", "/home", str(box.etc / "profiles")):
        probe = f"{where}/.vsup-rollback-probe"
        assert box.in_daemon_ns(f"mkdir -p $R{where} && touch $R{probe} && rm $R{probe}") == 0, where
    assert box.in_daemon_ns("touch $R/usr/.vsup-probe") != 0
    assert box.in_daemon_ns("touch $R/etc/systemd/.vsup-probe") != 0


def test_second_init_changes_nothing(box: Box) -> None:
    """The same init again: same files (content, mode, mtime), same daemon process, same container."""
    before, pid, cid = box.tree(), box.show("MainPID"), box.inspect(box.model)["Id"]
    proc = _init(box, box.model)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing changed" in proc.stdout
    assert box.tree() == before
    assert box.show("MainPID") == pid
    assert box.inspect(box.model)["Id"] == cid


def test_docker_kill_is_recovered_with_the_key_in_no_command_line(box: Box) -> None:
    """docker kill: the daemon (not Docker) recreates it from the profile: the /tmp file from its copy, the
    key in the environment (no process on the host shows it in /proc/PID/cmdline), auth still on."""
    old = box.inspect(box.model)
    assert KEY in _cmdlines()  # the hand-started container had it on its command line
    subprocess.run(["docker", "kill", old["Id"]], check=True, capture_output=True, timeout=60)
    st = box.wait_running(box.model, other_than=old["Id"])
    new = box.inspect(str(st["container_id"]))
    assert new["Name"] == old["Name"]
    assert new["Config"]["Image"] == old["Config"]["Image"]
    assert KEY not in new["Config"]["Cmd"]
    assert f"VLLM_API_KEY={KEY}" in new["Config"]["Env"]
    assert f"HTTPS_PROXY={PROXY}" in new["Config"]["Env"]
    sources = [m["Source"] for m in new["Mounts"] if m["Destination"] == "/models/config.json"]
    assert sources == [str(_copy(box))]
    assert new["HostConfig"]["PortBindings"] == old["HostConfig"]["PortBindings"]
    assert new["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert KEY not in _cmdlines()
    base = f"http://127.0.0.1:{box.port}/v1/models"
    assert http_status(base, None) == 401
    assert http_status(base, KEY) == 200
    assert box.ctl("diff", box.model, check=False).returncode == 0  # the new container is the profile


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_failed_patch_edit_is_rolled_back_into_opt_and_home(box: Box) -> None:
    """A real patch rollback under the shipped unit: the operator breaks both patch files (one under /opt,
    one under /home) and the profile, the start fails, the daemon writes the last known good's patch files
    back (ProtectSystem=strict or ProtectHome= would make that write fail) and starts it."""

    def saved(s: dict[str, Any]) -> bool:
        saved_fp = s["last_known_good"]["fingerprint"]
        return bool(s["state"] == "RUNNING" and saved_fp == s["kv_pool"]["fingerprint"])

    good = box.wait_status(box.model, saved, 60, "the last known good of the recreated container saved")
    kept = {name: patch.read_bytes() for name, patch in box.patches.items()}
    profile = box.etc / "profiles" / f"{box.model}.yaml"
    text = profile.read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    doc.update(rollback_after=1, on_failed_change="rollback")
    doc["container"]["env"]["VSIM_SCENARIO"] = "fail_engine_init"
    for patch in box.patches.values():
        patch.write_bytes(patch.read_bytes() + b"\n# the edit that breaks the engine\n")
    profile.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    try:
        assert box.ctl("reload").returncode == 0
        assert box.ctl("restart", box.model).returncode == 0
        st = box.wait_status(
            box.model,
            lambda s: (
                s["state"] == "RUNNING"
                and s["running_spec"] == "last_known_good"
                and s["container_id"] != good["container_id"]
            ),
            180,
            "rolled back to the last known good",
        )
        for name, patch in box.patches.items():
            assert patch.read_bytes() == kept[name], patch
        assert st["kv_pool"]["fingerprint"] == good["kv_pool"]["fingerprint"]
        journal = box.sh("journalctl", "-u", UNIT, "--no-pager", "-o", "cat").stdout
        assert "last_good.patches_restored" in journal
    finally:
        profile.write_text(text, encoding="utf-8")  # the profile as init wrote it: the running spec again
        box.ctl("reload", check=False)


def test_a_second_init_adds_a_profile(box: Box, sim_image: str) -> None:
    """A second model on the same box: init adds its profile; both are supervised."""
    test_id = box.name.rsplit("-", 1)[1]
    run_sim(box.second, test_id, box.port2, sim_image)
    health = f"http://127.0.0.1:{box.port2}/health"
    wait_for(lambda: http_status(health, None) == 200, 60, 0.5, "second sim healthy")
    cid = box.inspect(box.second)["Id"]
    proc = _init(box, box.second)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = yaml.safe_load((box.etc / "daemon.yaml").read_text(encoding="utf-8"))
    assert config["profiles"] == [f"profiles/{box.model}.yaml", f"profiles/{box.second}.yaml"]
    assert box.wait_running(box.second)["container_id"] == cid
    assert box.wait_running(box.model)["state"] == "RUNNING"
    _no_secret_in_readable_files(box)


def test_uninit_of_one_profile_leaves_the_other_supervised(box: Box) -> None:
    """uninit NAME: that profile is gone from the daemon (its container keeps running), the other is
    still supervised: a docker kill of it is recovered."""
    first = box.inspect(box.model)["Id"]
    proc = box.ctl("uninit", box.model, "--etc", str(box.etc), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert box.show("ActiveState") == "active"
    wait_for(lambda: box.model not in box.profiles(), 60, 1.0, "the first profile gone")
    assert box.inspect(box.model)["State"]["Running"]
    assert box.inspect(box.model)["Id"] == first
    old = box.inspect(box.second)["Id"]
    subprocess.run(["docker", "kill", old], check=True, capture_output=True, timeout=60)
    assert box.wait_running(box.second, other_than=old)["state"] == "RUNNING"


def test_uninit_leaves_the_model_running(box: Box) -> None:
    """uninit: the unit is gone, the config kept (no flag), the model container still running."""
    cid = box.inspect(box.second)["Id"]
    proc = box.ctl("uninit", "--etc", str(box.etc), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert box.sh("test", "-e", f"/etc/systemd/system/{UNIT}", check=False).returncode != 0
    assert box.show("ActiveState") == "inactive"
    assert (box.etc / "daemon.yaml").exists()
    assert box.sh("cat", "/etc/cron.d/qwen-suite").stdout == SUITE_CRON + "\n"  # the suite given back
    info = box.inspect(box.second)
    assert info["Id"] == cid
    assert info["State"]["Running"]

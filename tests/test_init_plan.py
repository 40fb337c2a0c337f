"""``supervisorctl init``'s pure parts: box detection, the secrets split, the planned files, idempotence.

Plain values only; the files a plan writes are loaded back with the real config loader (the profile must
recreate the very container it was taken from), and written twice to a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.adapters.secrets import spec_with_key
from supervisor.config import load_config
from supervisor.core.events import ContainerObserved, DaemonStarted
from supervisor.core.spec.model import ContainerSpec, EnvVar, PortBinding
from supervisor.core.states import State
from supervisor.offline.box import OTHER, SPARK, THOR, BoxFacts, detect_box, host_section, startup_section
from supervisor.offline.init import InitError, file_state, write_file
from supervisor.offline.init_plan import (
    Channel,
    InitOptions,
    Install,
    Plan,
    build_plan,
    profile_name,
    render_unit,
    split_secrets,
)
from tests.test_machine_driver import Driver

ROOT = Path(__file__).resolve().parent.parent
UNITS = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "supervisor" / "data" / "systemd").iterdir()}
KEY = "sk-plain-test-key"


def _spec(command: tuple[str, ...] = ("--model", "/m", "--api-key", KEY), **kw: object) -> ContainerSpec:
    env = (EnvVar("HF_TOKEN", "hf_x'\"$"), EnvVar("A_QUOTES", 'he said "hi" $HOME'), EnvVar("B", " sp "))
    base: dict[str, object] = {
        "name": "qwen",
        "image": "vllm:plemmap",
        "command": command,
        "env": env,
        "ports": (PortBinding(8000, 18000, "tcp", "127.0.0.1"),),
        "labels": (("vllm-supervisor.profile", "qwen"), ("team", "ml")),
    }
    return ContainerSpec(**{**base, **kw})  # type: ignore[arg-type]


# ---- box ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        (BoxFacts(model="NVIDIA Jetson AGX Thor Developer Kit\x00", mem_total_gib=122.86), THOR),
        (BoxFacts(model="NVIDIA DGX Spark\x00"), SPARK),
        (BoxFacts(model=None, gpus=("NVIDIA GB10",), mem_total_gib=121.6), SPARK),
        (BoxFacts(model="Raspberry Pi 4 Model B Rev 1.4\x00"), OTHER),
        (BoxFacts(gpus=("NVIDIA GeForce RTX 4090",), mem_total_gib=62.7), OTHER),
        (BoxFacts(), OTHER),
    ],
)
def test_box_detection_from_device_tree_and_gpu_names(facts: BoxFacts, kind: str) -> None:
    """Thor by the device-tree model, Spark by its model or its GB10 GPU, anything else is other."""
    box = detect_box(facts)
    assert box.kind == kind
    assert "\x00" not in box.evidence


def test_thor_host_defaults_follow_the_field_reports() -> None:
    """Thor: 15 GiB reserve, memory guard on, vLLM's share from its gmu plus the reserve, 30 min deadline."""
    box = detect_box(BoxFacts(model="NVIDIA Jetson AGX Thor Developer Kit", mem_total_gib=122.86))
    host = host_section(box)
    assert host["reserve_gib"] == 15
    assert host["min_mem_available_gib"] == "auto"  # gmu x MemTotal + reserve at each start, no literal
    assert host["memory_guard"]["enabled"] is True
    assert host["settle_timeout_s"] == 300
    assert startup_section(box) == {"deadline_s": 1800, "adopt_grace_s": 900}


def test_spark_and_other_defaults() -> None:
    """Spark: the floor from the config as on Thor, 1 h deadline; other: no memory guard, no drop_caches."""
    spark = detect_box(BoxFacts(gpus=("NVIDIA GB10",)))
    assert host_section(spark)["min_mem_available_gib"] == "auto"
    assert host_section(spark)["reserve_gib"] == 15
    assert startup_section(spark)["deadline_s"] == 3600
    other = detect_box(BoxFacts())
    assert host_section(other) == {"drop_caches": False, "memory_guard": {"enabled": False}}
    assert startup_section(other) == {}


# ---- secrets -----------------------------------------------------------------------------------------
def test_split_takes_the_key_from_the_command_line() -> None:
    """--api-key K leaves the command (it comes back through VLLM_API_KEY), HF_TOKEN is hidden, the
    daemon's label dropped, nothing secret is left behind."""
    sec = split_secrets(_spec())
    assert sec.key == KEY
    assert (sec.key_in, sec.key_from) == ("env", "arg")
    assert sec.spec.command == ("--model", "/m")
    assert sec.residual == frozenset()
    assert [e.name for e in sec.secret_env] == ["HF_TOKEN"]
    assert [e.name for e in sec.spec.env] == ["A_QUOTES", "B"]
    assert sec.spec.labels == (("team", "ml"),)


def test_split_takes_the_key_from_the_equals_form_and_from_the_env() -> None:
    """--api-key=K is found too; without any flag, env VLLM_API_KEY is the key."""
    assert split_secrets(_spec(("--x", "--api-key=" + KEY))).spec.command == ("--x",)
    env = (EnvVar("VLLM_API_KEY", KEY),)
    sec = split_secrets(_spec(("--model", "/m"), env=env))
    assert (sec.key, sec.key_in, sec.secret_env, sec.spec.env) == (KEY, "env", (), ())
    assert split_secrets(_spec(("--model", "/m"), env=())).key is None


# ---- the plan ----------------------------------------------------------------------------------------
def _plan(tmp_path: Path, spec: ContainerSpec | None = None, policy: str = "unless-stopped") -> Plan:
    opts = InitOptions(
        channels=(Channel("generic", "http://127.0.0.1:9/hook"), Channel("dingtalk", "https://x/t", "SEC")),
        language="zh",
        heartbeat_url="https://hc-ping.invalid/uuid",
        etc=tmp_path / "etc",
        unit_dir=tmp_path / "units",
    )
    box = detect_box(BoxFacts(model="NVIDIA Jetson AGX Thor Developer Kit", mem_total_gib=122.86))
    return build_plan(spec or _spec(), box, opts, UNITS, Install(), policy)


def test_plan_files_modes_and_secrets(tmp_path: Path) -> None:
    """Config and profile 0644 without a secret in them; key, env, URLs and the signing secret 0600."""
    plan = _plan(tmp_path)
    etc = tmp_path / "etc"
    modes = {str(f.path.relative_to(tmp_path)): f.mode for f in plan.files}
    assert modes == {
        "etc/daemon.yaml": 0o644,
        "etc/profiles/qwen.yaml": 0o644,
        "etc/profiles/qwen.env": 0o600,
        "etc/profiles/secrets/qwen.key": 0o600,
        "etc/alerts/generic.url": 0o600,
        "etc/alerts/dingtalk.url": 0o600,
        "etc/alerts/dingtalk.secret": 0o600,
        "etc/heartbeat.url": 0o600,
        "units/vllm-supervisor.service": 0o644,
        "units/vllm-supervisor-failure@.service": 0o644,
    }
    for f in plan.files:
        if not f.secret:
            for secret in (KEY, "hf_x", "127.0.0.1:9/hook", "SEC\n", "hc-ping"):
                assert secret not in f.text, (f.path, secret)
    assert plan.file(etc / "profiles" / "secrets" / "qwen.key").text == KEY + "\n"
    notes = "\n".join(plan.notes)
    assert "box: thor" in notes
    assert "unless-stopped" in notes
    assert KEY not in notes


def test_written_plan_loads_and_recreates_the_same_container(tmp_path: Path) -> None:
    """The files pass the config loader; the profile's spec with its key resolved is the container's."""
    plan = _plan(tmp_path)
    for f in plan.files:
        write_file(f, force=False, stamp="s")
    cfg = load_config(tmp_path / "etc" / "daemon.yaml")
    assert cfg.alerts.language == "zh"
    assert cfg.host.reserve_gib == 15
    assert cfg.maintenance.enabled is True  # the bash suite's weekly restart: Sunday 04:00 local
    assert cfg.maintenance.cron == "0 4 * * 0"
    (profile,) = cfg.profiles
    assert profile.name == "qwen"
    assert profile.base_url == "http://127.0.0.1:18000"
    want = spec_with_key(profile.api_key, profile.container)
    original = _spec()
    assert want.command == ("--model", "/m")  # the key is not on the command line any more ...
    assert want.env_dict() == original.env_dict() | {"VLLM_API_KEY": KEY}  # ... but in the environment
    assert want.labels == (("team", "ml"),)
    assert want.ports == original.ports


def test_env_key_goes_back_as_env(tmp_path: Path) -> None:
    """A key from env VLLM_API_KEY comes back under that name (inject_env), not on the command line."""
    spec = _spec(("--model", "/m"), env=(EnvVar("VLLM_API_KEY", KEY),))
    for f in _plan(tmp_path, spec).files:
        write_file(f, force=False, stamp="s")
    (profile,) = load_config(tmp_path / "etc" / "daemon.yaml").profiles
    assert profile.api_key is not None
    assert (profile.api_key.inject_env, profile.api_key.inject_arg) == ("VLLM_API_KEY", None)
    assert spec_with_key(profile.api_key, profile.container).env_dict() == {"VLLM_API_KEY": KEY}


def test_plan_is_deterministic_and_a_second_write_changes_nothing(tmp_path: Path) -> None:
    """Same input, same bytes; writing again leaves every file (and its mtime) alone."""
    first, second = _plan(tmp_path), _plan(tmp_path)
    assert first == second
    for f in first.files:
        assert write_file(f, force=False, stamp="s") == "new"
    mtimes = {f.path: f.path.stat().st_mtime_ns for f in first.files}
    for f in second.files:
        assert file_state(f) == "same"
        assert write_file(f, force=False, stamp="s") == "same"
        assert f.path.stat().st_mtime_ns == mtimes[f.path]
        assert f.path.stat().st_mode & 0o777 == f.mode


def test_a_different_file_needs_force_and_keeps_a_backup(tmp_path: Path) -> None:
    """A hand-edited file is refused without --force; with it the old file is kept as NAME.bak.STAMP."""
    plan = _plan(tmp_path)
    f = plan.file(tmp_path / "etc" / "daemon.yaml")
    f.path.parent.mkdir(parents=True)
    f.path.write_text("# mine\n", encoding="utf-8")
    os.chmod(f.path, 0o644)
    assert file_state(f) == "differs"
    with pytest.raises(InitError, match="--force"):
        write_file(f, force=False, stamp="s")
    assert f.path.read_text(encoding="utf-8") == "# mine\n"
    assert write_file(f, force=True, stamp="20260101T000000Z") == "differs"
    assert f.path.read_text(encoding="utf-8") == f.text
    assert (f.path.parent / "daemon.yaml.bak.20260101T000000Z").read_text(encoding="utf-8") == "# mine\n"


def test_unit_rendering_for_a_checkout_and_for_the_installed_venv() -> None:
    """The shipped unit names /opt/vllm-supervisor/venv; a checkout runs python -m with PYTHONPATH."""
    shipped = UNITS["vllm-supervisor.service"]
    assert render_unit(shipped, Install(), Path("/etc/vllm-supervisor")) == shipped
    dev = render_unit(
        shipped, Install("/v/bin/python -m supervisor", "x", "/src"), Path("/etc/vllm-supervisor")
    )
    assert "ExecStart=/v/bin/python -m supervisor --config /etc/vllm-supervisor/daemon.yaml\n" in dev
    assert "Environment=PYTHONPATH=/src\n" in dev
    failure = render_unit(UNITS["vllm-supervisor-failure@.service"], Install(ctl="/v/bin/ctl"), Path("/e"))
    assert "ExecStart=/v/bin/ctl unit-failed %i --config /e/daemon.yaml" in failure


def test_profile_name_from_container_name() -> None:
    """Container names that are not profile names are made into one."""
    assert profile_name("vllm-flashnext") == "vllm-flashnext"
    assert profile_name("/weird name!") == "weird-name"
    assert profile_name("___") == "model"


# ---- adoption warns about Docker's own restart policy -------------------------------------------------
@pytest.mark.parametrize("policy", ["unless-stopped", "always", "on-failure"])
def test_adoption_warns_about_a_docker_restart_policy(policy: str) -> None:
    """Adopting a container Docker also restarts: a warning alert naming the policy, still adopted."""
    d = Driver()
    d.send(DaemonStarted(boot_changed=False))
    acts = d.send(ContainerObserved("c9", True, None, policy))
    assert d.st() == State.STARTING
    (alert,) = d.alerts(acts)
    assert alert.severity == "warning"
    assert alert.kind == "adopt.restart_policy"
    assert policy in alert.title


def test_adoption_with_restart_policy_no_is_quiet() -> None:
    """Restart policy no (what init sets): no alert on adoption."""
    d = Driver()
    d.send(DaemonStarted(boot_changed=False))
    assert d.alerts(d.send(ContainerObserved("c9", True, None, "no"))) == []


def test_the_package_ships_the_repository_units() -> None:
    """init writes the units found inside the package: the same bytes as the repository's systemd/."""
    from supervisor.offline.init_facts import shipped_units

    assert shipped_units() == {n: (ROOT / "systemd" / n).read_text(encoding="utf-8") for n in UNITS}

"""``supervisorctl init``'s plan for a container started like field report 000's (issue 38): the key on the
command line, a proxy URL with a password, a bind source under /tmp; the secrets no split can move; a
second ``init`` adding its profile; ``uninit NAME``; the derived gates and markers; the locale; the
install-path check; secrets never taken from the command line. Plain values and temporary directories.
"""

from __future__ import annotations

import io
import re
import stat
from pathlib import Path

import pytest

from supervisor.adapters.secrets import spec_with_key
from supervisor.cli.offline import _secret_input
from supervisor.config import load_config
from supervisor.core.spec.model import ContainerSpec, EnvVar, Mount, PortBinding
from supervisor.offline.box import BoxFacts, detect_box
from supervisor.offline.init import Facts, file_state, print_plan, write_file
from supervisor.offline.init_config import listed, without_profile
from supervisor.offline.init_derive import language_from_locale
from supervisor.offline.init_install import PathFacts, unsafe
from supervisor.offline.init_plan import PLACEHOLDER, InitOptions, Install, Plan, build_plan, split_secrets
from supervisor.offline.init_types import Disk, TmpFile

ROOT = Path(__file__).resolve().parent.parent
UNITS = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "supervisor" / "data" / "systemd").iterdir()}
KEY = "sk-seed000-key-0123456789"
PROXY_PASSWORD = "pr0xy-S3cret"
PROXY = f"http://user:{PROXY_PASSWORD}@proxy:3128"
FIXED = "/tmp/fixed_config.json"
FIXED_TEXT = b'{"model_type": "qwen4_exp"}\n'


def _seed000(name: str = "vllm-flashnext", port: int = 8000, *extra: str) -> ContainerSpec:
    """Field report 000's docker run, shortened: /tmp bind, --api-key, a proxy with a password."""
    return ContainerSpec(
        name=name,
        image="vllm-thor:plemmap",
        command=(
            "/model",
            "--served-model-name",
            "qwen3.8-flash-next",
            "--port",
            str(port),
            "--gpu-memory-utilization",
            "0.80",
            "--api-key",
            KEY,
            *extra,
        ),
        env=(EnvVar("VLLM_PLE_MMAP", "1"), EnvVar("HTTPS_PROXY", PROXY)),
        mounts=(
            Mount("/path/flash-next", "/model", read_only=True),
            Mount(FIXED, "/model/config.json", read_only=True),
            Mount("/opt/p/modelopt.py", "/usr/lib/python3/dist-packages/vllm/modelopt.py", read_only=True),
        ),
        ports=(PortBinding(8000, port, "tcp", "127.0.0.1"),),
    )


def _disk(daemon_config: str | None = None) -> Disk:
    return Disk(daemon_config, {FIXED: (TmpFile("", FIXED_TEXT, 0o100644),)})


def _plan(tmp_path: Path, spec: ContainerSpec | None = None, disk: Disk | None = None) -> Plan:
    opts = InitOptions(language="zh-TW", etc=tmp_path / "etc", unit_dir=tmp_path / "units")
    box = detect_box(BoxFacts(model="NVIDIA Jetson AGX Thor Developer Kit", mem_total_gib=122.86))
    return build_plan(spec or _seed000(), box, opts, UNITS, Install(), "no", disk or _disk())


def _apply(plan: Plan) -> None:
    for f in plan.files:
        write_file(f, force=False, stamp="s")


def _printed(plan: Plan) -> str:
    lines: list[str] = []
    print_plan(Facts("c" * 64, "no", plan), lines.append)
    return "\n".join(lines)


def test_seed000_plan_keeps_every_secret_out_of_0644_files_and_the_output(tmp_path: Path) -> None:
    """The key goes to the environment (a 0600 file), the proxy URL to the 0600 env file; no 0644 file
    and no printed line holds the key or the proxy password; no --api-key is planned."""
    plan = _plan(tmp_path)
    out = _printed(plan)
    for secret in (KEY, PROXY_PASSWORD):
        assert secret not in out
        assert secret not in "\n".join(plan.notes)
        for f in plan.files:
            if f.mode & 0o077:
                assert secret not in f.text, f.path
    assert "inject_arg" not in out
    assert "--api-key" not in plan.file(tmp_path / "etc" / "profiles" / "vllm-flashnext.yaml").text
    env = plan.file(tmp_path / "etc" / "profiles" / "vllm-flashnext.env")
    assert (env.mode, env.text) == (0o600, f"HTTPS_PROXY={PROXY}\n")


def test_seed000_profile_recreates_the_container_with_the_key_in_its_environment(tmp_path: Path) -> None:
    """Loaded back: the command has no key, the env has VLLM_API_KEY and the proxy, the /tmp bind source
    is the copy in the config directory (the same bytes), the weekly maintenance is on."""
    _apply(_plan(tmp_path))
    cfg = load_config(tmp_path / "etc" / "daemon.yaml")
    assert cfg.maintenance.enabled is True
    assert cfg.alerts.language == "zh-TW"
    (profile,) = cfg.profiles
    assert profile.api_key is not None
    want = spec_with_key(profile.api_key, profile.container)
    assert KEY not in want.command
    assert "--api-key" not in want.command
    assert want.env_dict() == {"VLLM_PLE_MMAP": "1", "HTTPS_PROXY": PROXY, "VLLM_API_KEY": KEY}
    (fixed,) = [m for m in want.mounts if m.target == "/model/config.json"]
    copy = tmp_path / "etc" / "profiles" / "vllm-flashnext.files" / "0-fixed_config.json"
    assert fixed.source == str(copy)
    assert copy.read_bytes() == FIXED_TEXT
    assert FIXED not in {m.source for m in want.mounts}


def test_gates_and_markers_are_derived_from_the_flags(tmp_path: Path) -> None:
    """Served name always; tool-call and reasoning flags add their gate and marker; all gates warn."""
    flags = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")
    _apply(_plan(tmp_path, _seed000("m", 8000, *flags)))
    (profile,) = load_config(tmp_path / "etc" / "daemon.yaml").profiles
    kinds = [g.kind for g in profile.smoke.gates]
    assert kinds == ["stream_usage", "degeneration", "tool_call", "think_leak"]
    assert {g.policy for g in profile.smoke.gates} == {"warn"}
    # vLLM's own line (dict repr; a list for the served names), as a real 0.32 log prints it
    line = (
        "(APIServer pid=1) INFO 12-01 20:04:41 [api_utils.py:286] non-default args: {'model': '/model', "
        "'served_model_name': ['qwen3.8-flash-next'], 'tool_call_parser': 'hermes', "
        "'reasoning_parser': 'qwen3'}"
    )
    assert len(profile.markers.expected) == 3
    other = line.replace("'hermes'", "'x'").replace("['qwen3.8", "['other").replace("'qwen3'}", "'y'}")
    for pattern in profile.markers.expected:
        assert re.search(pattern, line), pattern
        assert not re.search(pattern, other), pattern
    plain = tmp_path / "plain"
    _apply(_plan(plain, _seed000("m2")))
    (profile,) = load_config(plain / "etc" / "daemon.yaml").profiles
    assert [g.kind for g in profile.smoke.gates] == ["stream_usage", "degeneration"]
    assert "overlay files (1" in "\n".join(_plan(plain, _seed000("m2")).notes)


@pytest.mark.parametrize(
    ("extra", "hidden"),
    [
        (("--api-key", "sk-second-key-abcdef"), "sk-second-key-abcdef"),  # vLLM takes several keys
        (("--hf-token", "hf_abcdefghijklmnop"), "hf_abcdefghijklmnop"),
    ],
)
def test_secrets_the_split_cannot_move_make_the_profile_0600(
    tmp_path: Path, extra: tuple[str, ...], hidden: str
) -> None:
    """A second key or --hf-token stays on the command line: the profile is 0600 and printed masked."""
    plan = _plan(tmp_path, _seed000("m", 8000, *extra))
    profile = plan.file(tmp_path / "etc" / "profiles" / "m.yaml")
    assert profile.mode == 0o600
    assert hidden in profile.text
    out = _printed(plan)
    assert hidden not in out
    assert KEY not in out
    assert "<secret>" in out
    for f in plan.files:
        if f.mode & 0o077:
            assert hidden not in f.text
            assert KEY not in f.text
    _apply(plan)
    assert (tmp_path / "etc" / "profiles" / "m.yaml").stat().st_mode & 0o777 == 0o600
    load_config(tmp_path / "etc" / "daemon.yaml")


def test_a_key_inside_a_shell_command_makes_the_profile_0600(tmp_path: Path) -> None:
    """``bash -c "vllm serve ... --api-key K"``: the one rule finds it in the argument."""
    spec = ContainerSpec(
        name="sh", image="i", entrypoint=("bash", "-c"), command=(f"vllm serve /m --api-key {KEY}",)
    )
    sec = split_secrets(spec)
    assert sec.key is None
    assert KEY in sec.residual
    plan = _plan(tmp_path, spec)
    assert plan.file(tmp_path / "etc" / "profiles" / "sh.yaml").mode == 0o600
    assert KEY not in _printed(plan)


def test_several_keys_keep_the_first_one_in_its_place_from_the_file() -> None:
    sec = split_secrets(_seed000("m", 8000, "sk-other-key-123456"))
    assert (sec.key, sec.key_in) == (KEY, "arg")
    assert PLACEHOLDER in sec.spec.command
    assert "sk-other-key-123456" in sec.residual


def test_a_second_init_adds_its_profile_and_uninit_takes_one_out(tmp_path: Path) -> None:
    """The second container's plan updates daemon.yaml (no --force: it is the text it was made from), both
    profiles load, a third plan of the same container changes nothing; without_profile leaves the other."""
    first = _plan(tmp_path)
    _apply(first)
    config = tmp_path / "etc" / "daemon.yaml"
    existing = config.read_text(encoding="utf-8")
    second = _plan(tmp_path, _seed000("second", 8001), _disk(existing))
    daemon = second.file(config)
    assert file_state(daemon) == "update"
    assert write_file(daemon, force=False, stamp="t") == "update"
    assert (tmp_path / "etc" / "daemon.yaml.bak.t").read_text(encoding="utf-8") == existing
    _apply(second)
    cfg = load_config(config)
    assert [p.name for p in cfg.profiles] == ["vllm-flashnext", "second"]
    assert cfg.maintenance.enabled is True
    again = _plan(tmp_path, _seed000("second", 8001), _disk(config.read_text(encoding="utf-8")))
    assert all(file_state(f) == "same" for f in again.files)
    text, was = without_profile(config.read_text(encoding="utf-8"), "vllm-flashnext")
    assert was
    assert listed(text) == ["profiles/second.yaml"]
    assert text.startswith("# Written by `supervisorctl init`")
    assert without_profile(text, "nope") == (text, False)


@pytest.mark.parametrize(
    ("env", "language"),
    [
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "zh_TW.UTF-8"}, "zh-TW"),
        ({"LANG": "zh_HK.UTF-8"}, "zh-TW"),
        ({"LC_ALL": "zh_TW.UTF-8", "LANG": "en_US.UTF-8"}, "zh-TW"),
        ({"LC_ALL": "C.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
        ({"LANG": "en_US.UTF-8"}, "en"),
        ({}, "en"),
    ],
)
def test_language_defaults_from_the_locale(env: dict[str, str], language: str) -> None:
    assert language_from_locale(env) == language


def test_install_paths_a_non_root_user_can_write_are_unsafe() -> None:
    """Owner and mode of every directory up the path: root-owned 0755 is fine, the rest is named."""
    d = stat.S_IFDIR
    facts = [
        PathFacts("/opt", 0, d | 0o755),
        PathFacts("/home/u", 1000, d | 0o755),
        PathFacts("/opt/venv", 0, d | 0o775),
        PathFacts("/srv", 0, d | 0o777),
        PathFacts("/opt/venv/bin/python", 0, stat.S_IFLNK | 0o777),
    ]
    assert unsafe(facts) == [
        "/home/u is owned by uid 1000, not root",
        "/opt/venv is writable by group (mode 0775)",
        "/srv is writable by every user (mode 0777)",
    ]
    assert unsafe(facts[:1]) == []


def test_secrets_are_read_from_files_or_standard_input_never_argv(tmp_path: Path) -> None:
    url = "https://oapi.dingtalk.com/robot/send?access_token=abc"
    with pytest.raises(ValueError, match="visible in ps"):
        _secret_input(url, "--dingtalk", io.StringIO())
    assert _secret_input("-", "--dingtalk", io.StringIO(url + "\nSECx\n")) == url
    path = tmp_path / "u"
    path.write_text(url + "\n", encoding="utf-8")
    assert _secret_input(str(path), "--dingtalk", io.StringIO()) == url
    with pytest.raises(ValueError, match="never taken from the command line"):
        _secret_input("SECabcdef", "--secret", io.StringIO())

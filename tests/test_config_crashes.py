"""Inputs that passed ``check-config`` and then crashed or hung the daemon (issue 39, items 1-4, 6, 8).

Each is now refused by the parser with the file, the key path and what is wrong, and ``vllm-supervisor``
itself exits 2 with that problem (the status its unit does not restart into a loop) instead of a traceback.
Only public entry points are used, so the same file runs against an older tree to show it failed there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from supervisor.config import check_config, load_config
from supervisor.core.errors import ConfigError
from supervisor.daemon.main import main

PROFILE = """\
name: p
container:
  name: vsup-crash
  image: vllm/vllm-openai:v0.11.0
  command: ["--model", "/m"]
  ports: ["127.0.0.1:8000:8000"]
{container}{extra}"""


def _write(
    tmp_path: Path, extra: str = "", daemon_extra: str = "", profiles: str = "[p.yaml]", container: str = ""
) -> Path:
    """A profile (``container`` lines added to its container, ``extra`` at its end) and a daemon config."""
    (tmp_path / "p.yaml").write_text(PROFILE.format(extra=extra, container=container), encoding="utf-8")
    daemon = tmp_path / "daemon.yaml"
    daemon.write_text(f"state_dir: {tmp_path}/state\nprofiles: {profiles}\n{daemon_extra}", encoding="utf-8")
    return daemon


def _refused(daemon: Path, file: Path, key: str, needle: str, capsys: pytest.CaptureFixture[str]) -> str:
    """check-config names file, key and problem; the daemon exits 2 with the same line, no traceback."""
    problems = check_config(daemon)
    assert problems, "accepted"
    shown = "\n".join(str(p) for p in problems)
    assert any(p.file == str(file) and p.key_path == key and needle in p.message for p in problems), shown
    with pytest.raises(ConfigError):
        load_config(daemon)
    assert main(["--config", str(daemon)]) == 2
    err = capsys.readouterr().err
    assert f"{file}: {key}: " in err
    assert "Traceback" not in err
    return shown


#: case -> (lines added to the container, lines added to the profile, key path, what the problem says)
CRASHES = {
    # 1. OverflowError in the size parser
    "shm_size": ('  shm_size: "' + "9" * 400 + 'g"\n', "", "container.shm_size", "at most 64 TiB"),
    # 1. ValueError (port out of range) when the daemon config reads the profile's base_url
    "base_url": ("", "base_url: http://127.0.0.1:99999\n", "base_url", "Port out of range"),
    # 1. a lone surrogate: UnicodeEncodeError in the fingerprint and the history
    "surrogate": ('  env: {A: "\\udcff"}\n', "", "container.env.A", "lone surrogate"),
    # 3. huge finite numbers
    "grace": ("", "stop: {grace_s: 1.0e+300}\n", "stop.grace_s", "must be <= 3600 (1 h)"),
    "interval": ("", "probes: {interval_s: 1.0e+300}\n", "probes.interval_s", "must be <= 86400 (1 d)"),
    "stop_timeout": ("  stop_timeout: 1" + "0" * 23 + "\n", "", "container.stop_timeout", "must be <= 3600"),
    "ulimit": (
        "  ulimits: [{name: nofile, soft: 1" + "0" * 23 + "}]\n",
        "",
        "container.ulimits[0].soft",
        "must be <= 9223372036854775807",
    ),
}


@pytest.mark.parametrize("case", sorted(CRASHES))
def test_an_input_that_crashed_the_start_is_refused(
    tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    container, extra, key, needle = CRASHES[case]
    daemon = _write(tmp_path, extra, container=container)
    _refused(daemon, tmp_path / "p.yaml", key, needle, capsys)


def test_a_channel_url_urlsplit_cannot_read_is_refused_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`http://u:p@[::1:bad/x` passed check-config, then SecretBook.learn_config raised at start."""
    url = "http://u:hunter2hunter2@[::1:bad/x"
    daemon = _write(tmp_path, daemon_extra=f'alerts:\n  channels: [{{kind: generic, url: "{url}"}}]\n')
    shown = _refused(daemon, daemon, "alerts.channels[0].url", "Invalid IPv6 URL", capsys)
    assert "hunter2" not in shown


def test_a_profile_name_past_the_store_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """129 characters: accepted, then the store raised at start (or on the reload that added it)."""
    daemon = _write(tmp_path)
    (tmp_path / "p.yaml").write_text(
        PROFILE.format(extra="", container="").replace("name: p\n", "name: " + "n" * 129 + "\n")
    )
    _refused(daemon, tmp_path / "p.yaml", "name", "at most 128 characters", capsys)


def test_the_longest_name_the_config_takes_is_one_the_store_writes(tmp_path: Path) -> None:
    from supervisor.adapters.store.state import Store

    (tmp_path / "p.yaml").write_text(
        PROFILE.format(extra="", container="").replace("name: p\n", "name: " + "n" * 128 + "\n")
    )
    config = load_config(_write_daemon_only(tmp_path))
    name = config.profiles[0].name
    assert len(name) == 128
    store = Store(tmp_path / "state")
    assert store.state_path(name).name.startswith(name)


def _write_daemon_only(tmp_path: Path) -> Path:
    daemon = tmp_path / "daemon.yaml"
    daemon.write_text(f"state_dir: {tmp_path}/state\nprofiles: [p.yaml]\n", encoding="utf-8")
    return daemon


BOMB = "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}" if p else '"lol"'] * 9) + "]\n"
    for c, p in zip("abcdefg", ["", *"abcdef"], strict=True)
)


def test_a_yaml_alias_is_refused_before_it_is_expanded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 272-byte alias bomb (9**7 strings once expanded): refused at the first anchor, file:line:col."""
    daemon = tmp_path / "daemon.yaml"
    daemon.write_text(BOMB, encoding="utf-8")
    problems = check_config(daemon)
    assert [p.file for p in problems] == [f"{daemon}:1:4"], problems
    assert "aliases and anchors" in problems[0].message
    assert main(["--config", str(daemon)]) == 2


def test_a_secret_file_a_profile_glob_matches_is_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`profiles: [dir/*]` next to the key and env files: 'must be a mapping' without the file's content."""
    prof = tmp_path / "profiles"
    prof.mkdir()
    (prof / "p.yaml").write_text(PROFILE.format(extra="", container=""), encoding="utf-8")
    for name, text in (("key", "sk-live-0123456789abcdef\n"), ("env", "HF_TOKEN=hf_0123456789abcdef\n")):
        (prof / name).write_text(text, encoding="utf-8")
        (prof / name).chmod(0o600)
    daemon = _write(tmp_path, profiles="[profiles/*]")
    shown = _refused(daemon, prof / "key", "(top level)", "must be a mapping, not a string", capsys)
    assert "0123456789abcdef" not in shown


def test_an_api_key_written_inline_is_never_shown(tmp_path: Path) -> None:
    daemon = _write(tmp_path, "api_key: sk-live-0123456789abcdef\n")
    shown = "\n".join(str(p) for p in check_config(daemon))
    assert "api_key: must be a mapping, not a string" in shown
    assert "0123456789abcdef" not in shown


@pytest.mark.skipif(os.geteuid() != 0, reason="the owner rule applies to a daemon running as root")
@pytest.mark.parametrize("kind", ["env_file", "api_key", "url_file"])
def test_a_secret_file_another_user_owns_is_refused(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 0600 env file owned by a user could set the container's LD_PRELOAD: refused like the YAML files."""
    monkeypatch.delenv("VLLM_SUPERVISOR_TRUST_CONFIG_FILES", raising=False)
    secret = tmp_path / "secret"
    secret.write_text("A=1\n" if kind == "env_file" else "http://example.invalid/hook\n", encoding="utf-8")
    secret.chmod(0o600)
    os.chown(secret, 65534, 65534)
    extra = {"env_file": "", "api_key": f"api_key: {{file: {secret}}}\n", "url_file": ""}[kind]
    daemon_extra = (
        f"alerts:\n  channels: [{{kind: generic, url_file: {secret}}}]\n" if kind == "url_file" else ""
    )
    container = f"  env_file: {secret}\n" if kind == "env_file" else ""
    daemon = _write(tmp_path, extra, daemon_extra, container=container)
    key, file = {
        "env_file": ("container.env_file", tmp_path / "p.yaml"),
        "api_key": ("api_key.file", tmp_path / "p.yaml"),
        "url_file": ("alerts.channels[0].url_file", daemon),
    }[kind]
    _refused(daemon, file, key, "is owned by uid 65534, not root", capsys)


def test_what_one_reload_parses_is_bounded(tmp_path: Path) -> None:
    """A reload parses on the loop thread: a file of more YAML values than any config has (a 400 KB
    flat list took 8.7 s in PyYAML's Python constructor) is refused by the C parser's count first, and a
    config lists at most 32 profile files."""
    from supervisor.config.daemon import MAX_PROFILE_FILES
    from supervisor.config.source import MAX_YAML_EVENTS

    flood = tmp_path / "flood.yaml"
    flood.write_text("name: p\nx: [" + ",".join(["1"] * 100_000) + "]\n", encoding="utf-8")
    problems = check_config(flood)
    assert len(problems) == 1, problems
    assert problems[0].file.startswith(f"{flood}:2:")  # the line of the value past the bound
    assert problems[0].message.endswith(f"more than {MAX_YAML_EVENTS} YAML values: not a config")
    many = tmp_path / "many"
    many.mkdir()
    for i in range(MAX_PROFILE_FILES + 1):
        (many / f"p{i}.yaml").write_text(
            PROFILE.format(extra="", container="").replace("name: p", f"name: p{i}")
        )
    problems = check_config(_write(tmp_path, profiles="[many/*.yaml]"))
    assert any(
        p.key_path == "profiles[0]" and f"more than {MAX_PROFILE_FILES}" in p.message for p in problems
    )


def test_every_number_the_parser_reads_has_a_row_in_the_bounds_table() -> None:
    """A new number key without a row would get only the generic 1e9 bound: each needs its own (config/
    bounds.py). Read here: every key of a config with one of each list item, parsed by the real parser."""
    from supervisor.config.bounds import listed
    from supervisor.config.daemon import parse_daemon
    from supervisor.config.profile import parse_profile
    from supervisor.config.reader import Ctx

    profile = {
        **yaml_of(PROFILE.format(extra="", container="")),
        "companions": [{"name": "gw", "url": "http://127.0.0.1:9000/health"}],
        "smoke": {"gates": [{"kind": "decode_floor"}, {"kind": "answer"}]},
    }
    profile["container"]["ulimits"] = [{"name": "nofile", "soft": 1}]
    profile["container"]["device_requests"] = [{"count": 1}]
    ctx = Ctx(file="<t>", base_dir=Path("/"))
    parse_profile(ctx, profile, Path("/p.yaml"))
    parse_daemon(
        ctx, {"profiles": [], "alerts": {"channels": [{"kind": "generic", "url": "http://x"}]}}, Path("/d")
    )
    assert len(ctx.numbers) > 40
    assert sorted(n for n in ctx.numbers if not listed(n)) == []


def yaml_of(text: str) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data

"""Config and profile parsing: every error class names file, key path and value; secrets never leak."""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from supervisor.adapters.secrets import (
    command_with_key,
    ensure_key_file,
    inline_or_file,
    new_key,
    resolve_api_key,
    spec_with_key,
)
from supervisor.config import (
    ApiKeySource,
    check_config,
    cli_check_config,
    container_create_kwargs,
    container_spec_to_yaml_dict,
    load_config,
    load_profile,
)
from supervisor.core.errors import ConfigError, ConfigProblem
from supervisor.core.spec.model import ContainerSpec, EnvVar

SECRET = "s3cr3t-Zq8Xw-DO-NOT-LEAK"


def write(path: Path, text: str, mode: int = 0o644) -> Path:
    """Write a file with `mode` from the first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text))
    return path


def profile(tmp_path: Path, body: str, name: str = "p.yaml") -> Path:
    """A profile file in tmp_path."""
    return write(tmp_path / name, body)


def find(problems: list[ConfigProblem], key_path: str) -> ConfigProblem:
    """The one problem at `key_path` (fails listing all problems otherwise)."""
    hits = [p for p in problems if p.key_path == key_path]
    assert len(hits) == 1, [str(p) for p in problems]
    return hits[0]


def test_a_problem_is_a_value_that_names_its_file_key_and_the_bad_value() -> None:
    a = ConfigProblem("p.yaml", "container.image", "must be a string", "42")
    assert str(a) == "p.yaml: container.image: must be a string (got 42)"
    assert str(ConfigProblem("p.yaml", "", "YAML syntax error")) == "p.yaml: YAML syntax error"
    assert a == ConfigProblem("p.yaml", "container.image", "must be a string", "42")
    assert a != ConfigProblem("p.yaml", "container.image", "must be a string")
    assert len({a, ConfigProblem("p.yaml", "container.image", "must be a string", "42")}) == 1
    assert "container.image" in repr(a)


MINIMAL = """\
container:
  image: img:1
"""


def test_minimal_profile_defaults(tmp_path: Path) -> None:
    """A profile with only an image gets the bash suite's defaults and names from the file."""
    prof = load_profile(profile(tmp_path, MINIMAL, "alpha.yaml"))
    assert prof.name == "alpha"
    assert prof.container.name == "alpha"
    assert prof.base_url == "http://127.0.0.1:8000"
    assert prof.probes.interval_s == 5
    assert prof.probes.failure_threshold == 4
    assert prof.startup.deadline_s == 1800
    assert prof.startup.adopt_grace_s == 900
    assert prof.stop.grace_s == 120  # = container.stop_timeout
    assert prof.stop.emergency_grace_s == 10
    assert prof.api_key is None
    assert prof.autostart is True


def test_unknown_key_suggests_closest(tmp_path: Path) -> None:
    """An unknown key is reported with its path and a did-you-mean suggestion."""
    f = profile(tmp_path, "container:\n  image: i\n  comand: [a]\nprobes:\n  intervall_s: 5\n")
    problems = check_config(f)
    p = find(problems, "container.comand")
    assert p.file == str(f)
    assert "did you mean 'command'" in p.message
    assert "did you mean 'interval_s'" in find(problems, "probes.intervall_s").message


def test_wrong_type_names_value(tmp_path: Path) -> None:
    """A wrong type names the expected type and shows the value."""
    f = profile(tmp_path, MINIMAL + "probes:\n  interval_s: fast\nautostart: 'yes'\n")
    problems = check_config(f)
    p = find(problems, "probes.interval_s")
    assert "must be a number" in p.message
    assert p.value == "'fast'"
    assert str(p) == f"{f}: probes.interval_s: must be a number, not a string (got 'fast')"
    assert find(problems, "autostart").value == "'yes'"


def test_missing_required_key(tmp_path: Path) -> None:
    """A missing image and a missing container section are named."""
    assert (
        "required"
        in find(check_config(profile(tmp_path, "container:\n  name: x\n")), "container.image").message
    )
    f = profile(tmp_path, "name: x\ncontainer:\n", "b.yaml")
    assert find(check_config(f), "container").message == "required key is missing"


def test_negative_timeout(tmp_path: Path) -> None:
    """Negative timeouts and a zero interval are rejected with the value."""
    f = profile(tmp_path, MINIMAL + "startup:\n  deadline_s: -5\nprobes:\n  interval_s: 0\n")
    problems = check_config(f)
    assert find(problems, "startup.deadline_s").value == "-5"
    assert "greater than 0" in find(problems, "probes.interval_s").message


def test_bad_cron_and_daemon_values(tmp_path: Path) -> None:
    """A bad cron expression, socket mode open to others and a bad drop_caches level are all reported."""
    f = write(
        tmp_path / "d.yaml",
        "maintenance:\n  cron: '61 4 * * 0'\nsocket_mode: '0666'\nhost:\n  drop_caches_level: 4\n"
        "backoff:\n  initial_s: 60\n  max_s: 10\n",
    )
    problems = check_config(f)
    assert find(problems, "maintenance.cron").value == "'61 4 * * 0'"
    assert "others" in find(problems, "socket_mode").message
    assert find(problems, "host.drop_caches_level").value == "4"
    assert "initial_s" in find(problems, "backoff.max_s").message
    assert len(problems) == 4


def test_cron_needs_five_fields(tmp_path: Path) -> None:
    """A 6-field cron is rejected (standard 5-field crontab only)."""
    f = write(tmp_path / "d.yaml", "maintenance:\n  cron: '0 0 4 * * 0'\n")
    assert "5-field" in find(check_config(f), "maintenance.cron").message


def test_maintenance_schedule_errors_name_file_key_and_value(tmp_path: Path) -> None:
    """check-config names file, key path and value: bad weekday, unknown zone, negative catch-up."""
    f = write(
        tmp_path / "d.yaml",
        "maintenance:\n  cron: '0 4 * * 8'\n  timezone: Europe/Atlantis\n  catch_up_s: -1\n",
    )
    problems = check_config(f)
    cron = find(problems, "maintenance.cron")
    assert (cron.file, cron.value) == (str(f), "'0 4 * * 8'")
    assert "day-of-week 8 out of range 0-7" in cron.message
    tz = find(problems, "maintenance.timezone")
    assert tz.value == "'Europe/Atlantis'"
    assert "unknown time zone" in tz.message
    assert find(problems, "maintenance.catch_up_s").value == "-1"
    assert len(problems) == 3
    buf = io.StringIO()
    assert cli_check_config(f, buf) == 1
    assert f"{f}: maintenance.cron: day-of-week 8 out of range 0-7" in buf.getvalue()
    for bad in ("@reboot", "0 4 31 2 *", "0 4 * * fri-tue"):
        g = write(tmp_path / "e.yaml", f"maintenance:\n  cron: '{bad}'\n")
        assert find(check_config(g), "maintenance.cron").value == repr(bad)


def test_maintenance_schedule_keys(tmp_path: Path) -> None:
    """Sunday as 7, an IANA zone and catch_up_s 0 are accepted and kept."""
    f = write(
        tmp_path / "d.yaml",
        "maintenance:\n  cron: '0 4 * * 7'\n  timezone: Asia/Tokyo\n  catch_up_s: 0\n",
    )
    cfg = load_config(f)
    assert (cfg.maintenance.cron, cfg.maintenance.timezone, cfg.maintenance.catch_up_s) == (
        "0 4 * * 7",
        "Asia/Tokyo",
        0,
    )
    assert load_config(write(tmp_path / "w.yaml", "maintenance:\n  cron: '@weekly'\n")).maintenance.cron == (
        "@weekly"
    )


def test_container_value_errors_with_paths(tmp_path: Path) -> None:
    """Ulimit names, ports, shm sizes, mount targets and restart policies are checked per list item."""
    f = profile(
        tmp_path,
        """\
        container:
          image: i
          ulimits: [memlock=-1, memlok=-1, {name: stack, soft: x}]
          ports: ["127.0.0.1:70000:8000", {container_port: 0}]
          shm_size: 32x
          mounts: [/a:/a, /b:/b:ro, {source: /c, target: relative/path}]
          restart_policy: always
        """,
    )
    problems = check_config(f)
    assert find(problems, "container.ulimits[1]").value == "'memlok'"
    assert "must be an integer" in find(problems, "container.ulimits[2].soft").message
    assert find(problems, "container.ports[0]").value == "70000"
    assert find(problems, "container.ports[1].container_port").value == "0"
    assert find(problems, "container.shm_size").value == "'32x'"
    assert find(problems, "container.mounts[2].target").value == "'relative/path'"
    restart = find(problems, "container.restart_policy")
    assert "only 'no'" in restart.message
    assert restart.value == "'always'"
    assert len(problems) == 7  # every problem, not just the first


def test_yaml_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    """A YAML syntax error names file:line:column."""
    f = profile(tmp_path, "container:\n  image: [unclosed\n  name: x\n")
    problems = check_config(f)
    assert len(problems) == 1
    assert problems[0].file.startswith(f"{f}:")
    line, col = problems[0].file.rsplit(":", 2)[1:]
    assert int(line) >= 2
    assert int(col) >= 1
    assert "YAML syntax error" in problems[0].message


def test_not_a_mapping(tmp_path: Path) -> None:
    """A top level that is not a mapping is one clear problem."""
    f = profile(tmp_path, "- a\n- b\n")
    assert "must be a mapping" in find(check_config(f), "(top level)").message


def test_short_forms_parse(tmp_path: Path) -> None:
    """Short mount/ulimit/port strings, gpus: all, sizes and relative mount sources parse as documented."""
    f = profile(
        tmp_path,
        """\
        container:
          image: i
          mounts: [./data:/data:ro, "named:/vol", "/x:/y:rw,rslave"]
          ulimits: [memlock=-1, stack=67108864, "nofile=1024:2048"]
          ports: ["127.0.0.1:8001:8000/tcp", "9000:9000"]
          gpus: all
          shm_size: 512m
          restart_policy: no
        """,
    )
    c = load_profile(f).container
    assert c.mounts[0].source == str(tmp_path / "data")
    assert c.mounts[0].read_only
    assert c.mounts[1].type == "volume"
    assert c.mounts[1].source == "named"
    assert c.mounts[2].propagation == "rslave"
    assert not c.mounts[2].read_only
    assert [(u.name, u.soft, u.hard) for u in c.ulimits] == [
        ("memlock", -1, -1),
        ("stack", 67108864, 67108864),
        ("nofile", 1024, 2048),
    ]
    assert (c.ports[0].host_ip, c.ports[0].host_port, c.ports[0].container_port) == ("127.0.0.1", 8001, 8000)
    assert c.device_requests[0].count == -1
    assert c.device_requests[0].capabilities == (("gpu",),)
    assert c.shm_size == 512 * 1024**2
    assert load_profile(f).base_url == "http://127.0.0.1:8001"  # container 8000 published on 8001


def test_base_url_and_served_name_derived(tmp_path: Path) -> None:
    """base_url follows --port through a published port; served name is the first --served-model-name."""
    f = profile(
        tmp_path,
        """\
        container:
          image: i
          command: [/m, --served-model-name, first, second, --port=8005]
          ports: [{container_port: 8005, host_port: 18005}]
        """,
    )
    prof = load_profile(f)
    assert prof.base_url == "http://127.0.0.1:18005"
    assert prof.served_model_name == "first"


def test_env_file_merge_and_literal_values(tmp_path: Path) -> None:
    """env_file values are literal to end of line; inline env overrides; comments and blanks skipped."""
    write(
        tmp_path / "a.env",
        "# comment\n\nA=x=y z\nB=\"quoted\" 'q'\nC=ünï\nD=from-file\n",
        0o600,
    )
    f = profile(tmp_path, "container:\n  image: i\n  env_file: a.env\n  env:\n    D: inline\n")
    prof = load_profile(f)
    assert prof.container.env_dict() == {"A": "x=y z", "B": "\"quoted\" 'q'", "C": "ünï", "D": "inline"}


def test_env_file_permissions(tmp_path: Path) -> None:
    """An env file readable by group/others is an error naming its mode; a missing one is an error too."""
    write(tmp_path / "open.env", f"K={SECRET}\n", 0o644)
    f = profile(tmp_path, "container:\n  image: i\n  env_file: [open.env, missing.env]\n")
    problems = check_config(f)
    open_p = find(problems, "container.env_file[0]")
    assert "0644" in open_p.message
    assert "0600" in open_p.message
    assert "cannot be read" in find(problems, "container.env_file[1]").message


def test_api_key_sources(tmp_path: Path) -> None:
    """api_key env must exist in the container env; a key file is read at call time and must be private."""
    f = profile(tmp_path, MINIMAL + "api_key:\n  env: VLLM_API_KEY\n")
    assert "does not define" in find(check_config(f), "api_key.env").message
    write(tmp_path / "key", SECRET + "\n", 0o640)
    f2 = profile(tmp_path, MINIMAL + "api_key:\n  file: key\n", "k.yaml")
    assert "0640" in find(check_config(f2), "api_key.file").message
    os.chmod(tmp_path / "key", 0o600)
    prof = load_profile(f2)
    assert prof.api_key is not None
    assert resolve_api_key(prof.api_key, prof.container) == SECRET
    write(tmp_path / "key", "rotated\n", 0o600)
    assert resolve_api_key(prof.api_key, prof.container) == "rotated"
    assert spec_with_key(prof.api_key, prof.container).env_dict()["VLLM_API_KEY"] == "rotated"
    both = profile(tmp_path, MINIMAL + "api_key: {env: A, file: key}\n", "both.yaml")
    assert "only one" in find(check_config(both), "api_key").message


def test_api_key_generate_creates_private_file(tmp_path: Path) -> None:
    """With generate, a missing key file is valid and ensure_key_file creates it 0600 with a random key."""
    src = ApiKeySource(file=tmp_path / "sub" / "key", generate=True)
    assert ensure_key_file(src) is True
    assert (os.stat(tmp_path / "sub" / "key").st_mode & 0o777) == 0o600
    key = resolve_api_key(src, ContainerSpec(name="n", image="i"))
    assert key is not None
    assert len(key) >= 32
    assert ensure_key_file(src) is False  # never overwrites


def test_a_generated_key_never_begins_with_a_dash() -> None:
    """token_urlsafe begins with '-' one time in 64 and vLLM refuses ``--api-key -K`` (fixture 054): of
    2,000 generated keys (about 31 would begin with '-') none does."""
    keys = [new_key() for _ in range(2000)]
    assert not [k for k in keys if k.startswith("-")]
    assert len(set(keys)) == 2000
    assert min(len(k) for k in keys) == 43


def test_a_key_that_begins_with_a_dash_is_injected_joined_to_its_flag() -> None:
    """``inject_arg``: ``--api-key OLD`` becomes ``--api-key NEW``, or ``--api-key=-NEW`` (one argument)."""
    cmd = ("--model", "/m", "--api-key", "old", "--port", "8000")
    assert command_with_key(cmd, "--api-key", "new") == (
        "--model",
        "/m",
        "--api-key",
        "new",
        "--port",
        "8000",
    )
    assert command_with_key(cmd, "--api-key", "-new") == ("--model", "/m", "--api-key=-new", "--port", "8000")
    assert command_with_key(("--api-key=old",), "--api-key", "-n") == ("--api-key=-n",)


def test_secrets_never_leak(tmp_path: Path) -> None:
    """A distinctive secret in env, env file, key file, alert and heartbeat URLs appears in no output."""
    write(tmp_path / "s.env", f"TOKEN={SECRET}\nbad line {SECRET}\n", 0o600)
    write(tmp_path / "key", SECRET, 0o600)
    good = profile(
        tmp_path,
        f"container:\n  image: i\n  env:\n    INLINE: {SECRET}\napi_key:\n  file: key\n",
        "good.yaml",
    )
    bad = profile(
        tmp_path,
        f"container:\n  image: i\n  env_file: s.env\n  env:\n    N: [{SECRET}]\n",
        "bad.yaml",
    )
    daemon = write(
        tmp_path / "d.yaml",
        f"profiles: [good.yaml]\nalerts:\n  channels:\n    - {{kind: slack, url: 'https://h/{SECRET}'}}\n"
        f"    - {{kind: feishu, url: 'ftp://{SECRET}', secret: {SECRET}}}\n"
        f"heartbeat:\n  url: 'https://hb/{SECRET}'\n",
    )
    daemon_ok = write(
        tmp_path / "ok.yaml",
        f"profiles: [good.yaml]\nalerts:\n  channels: [{{kind: slack, url: 'https://h/{SECRET}', "
        f"secret: {SECRET}}}]\nheartbeat: {{url: 'https://hb/{SECRET}'}}\n",
    )
    outputs: list[str] = []
    prof = load_profile(good)
    cfg = load_config(daemon_ok)
    outputs += [str(prof), repr(prof), str(cfg), repr(cfg), repr(spec_with_key(prof.api_key, prof.container))]
    for f in (bad, daemon):
        problems = check_config(f)
        assert problems
        outputs += [str(p) for p in problems] + [repr(p) for p in problems]
        buf = io.StringIO()
        assert cli_check_config(f, buf) == 1
        outputs.append(buf.getvalue())
        with pytest.raises(ConfigError) as exc:
            (load_profile if f == bad else load_config)(f)
        outputs.append(str(exc.value))
    joined = "\n".join(outputs)
    assert SECRET not in joined
    assert "'<secret>'" in joined  # the bad secret values were masked, not dropped silently
    assert (
        inline_or_file(cfg.alerts.channels[0].url, cfg.alerts.channels[0].url_file) == f"https://h/{SECRET}"
    )


def test_daemon_paths_relative_to_config(tmp_path: Path) -> None:
    """state_dir, socket, restore_dir and profile globs resolve against the config file's directory."""
    profile(tmp_path / "profiles", "container:\n  image: i\n", "one.yaml")
    profile(tmp_path / "profiles", "container:\n  image: j\n", "two.yaml")
    f = write(
        tmp_path / "etc" / "d.yaml",
        "state_dir: ./var\nsocket_path: run/s.sock\nprofiles: ['../profiles/*.yaml']\n",
    )
    cfg = load_config(f)
    assert cfg.state_dir == tmp_path / "etc" / "var"
    assert cfg.socket_path == tmp_path / "etc" / "run" / "s.sock"
    assert cfg.restore_dir == tmp_path / "etc" / "var" / "restore"
    assert [p.name for p in cfg.profiles] == ["one", "two"]
    assert cfg.breaker.limit == 3
    assert cfg.breaker.window_s == 7200
    assert (cfg.backoff.initial_s, cfg.backoff.factor, cfg.backoff.max_s) == (1, 2.0, 900)
    assert cfg.maintenance.cron == "0 4 * * 0"
    assert cfg.maintenance.drain_timeout_s == 600
    assert cfg.maintenance.timezone is None
    assert cfg.maintenance.catch_up_s == 21600
    assert cfg.socket_mode == 0o660
    assert cfg.alerts.dedupe_s == 900
    assert cfg.alerts.language == "en"


def test_daemon_reports_profile_problems_and_duplicates(tmp_path: Path) -> None:
    """Problems in listed profiles carry the profile file; duplicate names and empty globs are errors."""
    bad = profile(tmp_path, "container:\n  image: i\n  imagee: x\n", "bad.yaml")
    profile(tmp_path, "name: same\ncontainer:\n  image: i\n", "s1.yaml")
    profile(tmp_path, "name: same\ncontainer:\n  image: i\n  name: other\n", "s2.yaml")
    f = write(tmp_path / "d.yaml", "profiles: [bad.yaml, s1.yaml, s2.yaml, 'none/*.yaml']\n")
    problems = check_config(f)
    assert find(problems, "container.imagee").file == str(bad)
    assert "two profiles are named 'same'" in find(problems, "profiles").message
    assert find(problems, "profiles[3]").message == "the glob matches no file"


def test_alert_channel_validation(tmp_path: Path) -> None:
    """Alert kinds are checked; a channel needs a URL; telegram needs chat_id; url files must be private."""
    write(tmp_path / "u", "https://x\n", 0o644)
    f = write(
        tmp_path / "d.yaml",
        "alerts:\n  channels:\n    - {kind: teams, url: 'https://x'}\n    - {kind: slack}\n"
        "    - {kind: telegram, url: 'https://x'}\n    - {kind: generic, url_file: u}\n",
    )
    problems = check_config(f)
    assert find(problems, "alerts.channels[0].kind").value == "'teams'"
    assert "url" in find(problems, "alerts.channels[1]").message
    assert find(problems, "alerts.channels[2].chat_id").message == "required key is missing"
    assert "0644" in find(problems, "alerts.channels[3].url_file").message


def test_alerts_language(tmp_path: Path) -> None:
    """alerts.language is en (default) or zh; another value is an error naming the file, the key path
    and the value (the one-shot unit-failed alert then falls back to English, tests/test_unit_alert.py)."""
    profile(tmp_path, MINIMAL, "one.yaml")
    ok = write(tmp_path / "d.yaml", "profiles: [one.yaml]\nalerts:\n  language: zh\n")
    assert load_config(ok).alerts.language == "zh"
    bad = write(tmp_path / "b.yaml", "profiles: [one.yaml]\nalerts:\n  language: fr\n")
    problem = find(check_config(bad), "alerts.language")
    assert (problem.file, problem.value) == (str(bad), "'fr'")
    assert problem.message == "must be one of en, zh, zh-TW"
    with pytest.raises(ConfigError, match=r"alerts\.language"):
        load_config(bad)


def test_cli_check_config_output(tmp_path: Path) -> None:
    """check-config prints OK and returns 0 for a valid file, one line per problem and 1 otherwise."""
    buf = io.StringIO()
    assert cli_check_config(profile(tmp_path, "name: ok\n" + MINIMAL), buf) == 0
    first, *warnings = buf.getvalue().splitlines()
    assert first == "OK: profile ok"
    # valid but known to hurt: warnings, exit 0 (the minimal profile sets neither shm_size nor log_config)
    assert [w.split(": ")[2] for w in warnings] == ["container.shm_size", "container.log_config"]
    buf = io.StringIO()
    assert cli_check_config(profile(tmp_path, "container:\n  imagee: i\n", "x.yaml"), buf) == 1
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    assert any("did you mean 'image'" in ln for ln in lines)


def test_yaml_dict_round_trip(tmp_path: Path) -> None:
    """container_spec_to_yaml_dict produces the container: shape that parses back to the same spec."""
    spec = load_profile(
        profile(
            tmp_path,
            """\
            container:
              name: rt
              image: i:1
              entrypoint: []
              command: [a, "b c"]
              env: {A: "1", B: "x=y"}
              mounts: [/s:/t:ro, {type: tmpfs, target: /tmp/x}, {source: vol, target: /v, type: volume}]
              ulimits: [nofile=10:20]
              ports: ["127.0.0.1:1234:80/udp"]
              gpus: all
              runtime: nvidia
              labels: {k: v}
              cap_add: [SYS_PTRACE]
              init: true
              stop_signal: SIGINT
              stop_timeout: 7
            """,
        )
    ).container
    doc = {"container": container_spec_to_yaml_dict(spec, env_file=None)}
    again = load_profile(write(tmp_path / "rt.yaml", yaml.safe_dump(doc))).container
    assert again == spec
    write(tmp_path / "rt.env", "".join(f"{e.name}={e.value}\n" for e in spec.env), 0o600)
    doc = {"container": container_spec_to_yaml_dict(spec, env_file="rt.env")}
    assert "env" not in doc["container"]
    assert load_profile(write(tmp_path / "rt2.yaml", yaml.safe_dump(doc))).container == spec


def test_create_kwargs_shape() -> None:
    """container_create_kwargs maps a spec onto the docker SDK low-level create_container arguments."""
    spec = ContainerSpec(
        name="n",
        image="i",
        command=("x",),
        env=(EnvVar("A", "1"),),
        network_mode="host",
        runtime="nvidia",
        shm_size=1024,
        devices=("/dev/null",),
    )
    kw = container_create_kwargs(spec)
    assert kw["environment"] == ["A=1"]
    assert kw["command"] == ["x"]
    assert kw["entrypoint"] is None
    hc = kw["host_config"]
    assert hc["RestartPolicy"] == {"Name": "no", "MaximumRetryCount": 0}
    assert hc["Runtime"] == "nvidia"
    assert hc["NetworkMode"] == "host"
    assert hc["ShmSize"] == 1024
    assert hc["Devices"] == [
        {"PathOnHost": "/dev/null", "PathInContainer": "/dev/null", "CgroupPermissions": "rwm"}
    ]


def test_duplicate_yaml_key_is_an_error_with_line(tmp_path: Path) -> None:
    """A key given twice is refused (not silently last-wins), naming the key and both lines."""
    f = profile(tmp_path, "container:\n  image: a\n  env:\n    K: '1'\n  image: b\n")
    problems = check_config(f)
    assert len(problems) == 1, [str(p) for p in problems]
    assert problems[0].file == f"{f}:5:3"
    assert "duplicate key 'image'" in problems[0].message
    assert "line 2" in problems[0].message
    nested = profile(tmp_path, f"container:\n  image: a\n  env:\n    K: {SECRET}\n    K: other\n", "n.yaml")
    (dup,) = check_config(nested)
    assert "duplicate key 'K'" in dup.message
    assert SECRET not in str(dup)
    with pytest.raises(ConfigError, match="duplicate key"):
        load_profile(nested)


def test_stop_timeout_null_and_bind_rw_only_when_asked(tmp_path: Path) -> None:
    """`stop_timeout: null` leaves Docker's StopTimeout unset; a bind gets ':rw' only when written out."""
    spec = load_profile(
        profile(
            tmp_path,
            """\
            container:
              image: i
              stop_timeout: null
              mounts: ["/a:/a", "/b:/b:rw", "/c:/c:ro", {source: /d, target: /d, rw_explicit: true}]
            """,
        )
    )
    c = spec.container
    assert c.stop_timeout is None
    assert spec.stop.grace_s == 120  # the supervisor's own stop still has a grace
    kw = container_create_kwargs(c)
    assert "stop_timeout" not in kw
    assert kw["host_config"]["Binds"] == ["/a:/a", "/b:/b:rw", "/c:/c:ro", "/d:/d:rw"]
    doc = {"container": container_spec_to_yaml_dict(c, env_file=None)}
    assert doc["container"]["stop_timeout"] is None
    assert load_profile(write(tmp_path / "again.yaml", yaml.safe_dump(doc))).container == c
    assert load_profile(profile(tmp_path, MINIMAL, "m.yaml")).container.stop_timeout == 120
    bad = profile(
        tmp_path,
        "container:\n  image: i\n  mounts: [{source: /a, target: /a, read_only: true, rw_explicit: true}]\n",
        "bad.yaml",
    )
    assert "read_only" in find(check_config(bad), "container.mounts[0].rw_explicit").message


def test_host_port_zero_is_docker_picks_but_not_for_the_daemon(tmp_path: Path) -> None:
    """host_port 0 (random, as a snapshot of `-p 8000` has) parses; a daemon cannot probe it: error."""
    f = profile(
        tmp_path,
        """\
        name: rnd
        container:
          image: i
          command: [--port, "8000"]
          ports: [{container_port: 8000, host_port: 0}, "0:9000/udp"]
        """,
    )
    c = load_profile(f).container
    assert [(p.container_port, p.host_port) for p in c.ports] == [(8000, 0), (9000, 0)]
    bindings = container_create_kwargs(c)["host_config"]["PortBindings"]
    assert bindings["8000/tcp"] == [{"HostIp": "", "HostPort": ""}]
    assert (
        "must be 0"
        in find(
            check_config(
                profile(
                    tmp_path,
                    "container:\n  image: i\n  ports: [{container_port: 1, host_port: -1}]\n",
                    "neg.yaml",
                )
            ),
            "container.ports[0].host_port",
        ).message
    )
    daemon = write(tmp_path / "d.yaml", f"state_dir: {tmp_path / 'st'}\nprofiles: [{f}]\n")
    problem = find(check_config(daemon), "container.ports")
    assert problem.file == str(f)
    assert "random host port" in problem.message


def test_host_keys_of_the_host_watch(tmp_path: Path) -> None:
    """host.orphans, host.reserve_gib and memory_guard.psi_full_avg10_max parse, default off, and reach
    the daemon's parts; wrong values name the key."""
    from supervisor.config import load_config
    from supervisor.daemon.build import policy_for

    plain = write(tmp_path / "d0.yaml", f"state_dir: {tmp_path / 'st'}\nprofiles: []\n")
    d0 = load_config(plain).host
    assert (d0.orphans, d0.reserve_gib, d0.memory_guard.psi_full_avg10_max) == ("report", 0.0, 0.0)
    text = (
        f"state_dir: {tmp_path / 'st'}\nprofiles: []\n"
        "host:\n  orphans: kill\n  reserve_gib: 15\n"
        "  memory_guard: {psi_full_avg10_max: 25, sample_interval_s: 2}\n"
    )
    cfg = load_config(write(tmp_path / "d1.yaml", text))
    assert (cfg.host.orphans, cfg.host.reserve_gib) == ("kill", 15.0)
    assert (cfg.host.memory_guard.psi_full_avg10_max, cfg.host.memory_guard.sample_interval_s) == (25.0, 2.0)
    prof = load_profile(profile(tmp_path, MINIMAL, "m.yaml"))
    assert policy_for(prof, cfg).host.reserve_gib == 15.0
    bad = write(
        tmp_path / "d2.yaml",
        f"state_dir: {tmp_path / 'st'}\nprofiles: []\n"
        "host:\n  orphans: nuke\n  reserve_gib: -1\n  memory_guard: {psi_full_avg10_max: 101}\n",
    )
    problems = check_config(bad)
    assert (
        "nuke" in find(problems, "host.orphans").message or "report" in find(problems, "host.orphans").message
    )
    assert find(problems, "host.reserve_gib")
    assert find(problems, "host.memory_guard.psi_full_avg10_max")


def test_a_channel_language_overrides_alerts_language(tmp_path: Path) -> None:
    """alerts.channels[].language (en/zh) is that channel's language; unset: alerts.language."""
    profile(tmp_path, MINIMAL, "one.yaml")
    ok = write(
        tmp_path / "d.yaml",
        "profiles: [one.yaml]\nalerts:\n  language: en\n  channels:\n"
        "    - {kind: generic, name: ops, url: 'http://127.0.0.1:9/a'}\n"
        "    - {kind: feishu, name: cn, url: 'http://127.0.0.1:9/b', language: zh}\n",
    )
    assert [c.language for c in load_config(ok).alerts.channels] == [None, "zh"]
    bad = write(
        tmp_path / "b.yaml",
        "profiles: [one.yaml]\nalerts:\n  channels:\n"
        "    - {kind: generic, url: 'http://127.0.0.1:9/a', language: jp}\n",
    )
    problem = find(check_config(bad), "alerts.channels[0].language")
    assert (problem.value, problem.message) == ("'jp'", "must be one of en, zh, zh-TW")


def test_stop_emergency_grace_is_read_and_must_be_positive(tmp_path: Path) -> None:
    """stop.emergency_grace_s sets an emergency stop's SIGTERM -> SIGKILL; 0 or less is an error."""
    ok = profile(tmp_path, MINIMAL + "stop:\n  emergency_grace_s: 4\n", "ok.yaml")
    assert load_profile(ok).stop.emergency_grace_s == 4
    bad = profile(tmp_path, MINIMAL + "stop:\n  emergency_grace_s: 0\n", "bad.yaml")
    with pytest.raises(ConfigError, match=r"stop\.emergency_grace_s"):
        load_profile(bad)


def test_host_keys_of_the_wedge_guard(tmp_path: Path) -> None:
    """host.kernel_memory_error (kill | warn, default kill) reaches the policy; the hard floor's keys
    (default 3 / 1 GiB) parse; wrong values name the file's key."""
    from supervisor.config import load_config
    from supervisor.daemon.build import policy_for

    d0 = load_config(write(tmp_path / "d0.yaml", f"state_dir: {tmp_path / 'st'}\nprofiles: []\n")).host
    assert d0.kernel_memory_error == "kill"
    assert (d0.memory_guard.hard_mem_available_min_gib, d0.memory_guard.hard_memfree_min_gib) == (3.0, 1.0)
    text = (
        f"state_dir: {tmp_path / 'st'}\nprofiles: []\n"
        "host:\n  kernel_memory_error: warn\n"
        "  memory_guard: {hard_mem_available_min_gib: 0, hard_memfree_min_gib: 0.5}\n"
    )
    cfg = load_config(write(tmp_path / "d1.yaml", text))
    assert (cfg.host.memory_guard.hard_mem_available_min_gib, cfg.host.memory_guard.hard_memfree_min_gib) == (
        0.0,
        0.5,
    )
    assert (
        policy_for(load_profile(profile(tmp_path, MINIMAL, "m.yaml")), cfg).host.kernel_memory_error == "warn"
    )
    bad = write(
        tmp_path / "d2.yaml",
        f"state_dir: {tmp_path / 'st'}\nprofiles: []\n"
        "host:\n  kernel_memory_error: shrug\n  memory_guard: {hard_mem_available_min_gib: -1}\n",
    )
    problems = check_config(bad)
    p = find(problems, "host.kernel_memory_error")
    assert ("shrug" in (p.value or ""), p.message) == (True, "must be one of kill, warn")
    assert find(problems, "host.memory_guard.hard_mem_available_min_gib")

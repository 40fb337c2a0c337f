"""Bad and hostile config files: every one is a clear problem naming the file (and key), never a traceback.

``supervisorctl check-config`` runs as a real process, so an exception escaping the parser would show as a
traceback on stderr and a Python exit code; each case asserts the one-line problem and exit 1 instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config import load_config, load_profile
from supervisor.config.source import MAX_DEPTH, TRUST_ENV
from supervisor.core.errors import ConfigError
from tests.harness import REPO

PROFILE = """\
name: p
container:
  name: vsup-hostile
  image: vllm/vllm-openai:v0.11.0
  command: ["--model", "/m"]
  ports: ["127.0.0.1:8000:8000"]
{extra}"""


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != TRUST_ENV}
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
        check=False,
    )


def _refused(path: Path, needle: str) -> str:
    out = _check(path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert str(path) in out.stdout
    assert needle in out.stdout, out.stdout
    return out.stdout


def _profile(tmp_path: Path, extra: str = "", name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(PROFILE.format(extra=extra), encoding="utf-8")
    path.chmod(0o644)
    return path


def test_a_sound_profile_passes(tmp_path: Path) -> None:
    """The base of every case below is itself valid (so each refusal is the case's own fault)."""
    out = _check(_profile(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("OK: profile p")


def test_non_utf8_bytes_name_the_line(tmp_path: Path) -> None:
    """Latin-1 bytes in a comment: 'not valid UTF-8' with the line, not a UnicodeDecodeError."""
    path = _profile(tmp_path)
    path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    _refused(path, "is not valid UTF-8 (byte 0xe9 on line 7")


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    """2000 nested lists: 'nested too deeply', not a RecursionError."""
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 2000 + "]" * 2000 + "\n", encoding="utf-8")
    _refused(path, "nested too deeply")


def test_nesting_just_past_the_limit_is_refused_by_the_walk(tmp_path: Path) -> None:
    """Nesting PyYAML itself can build, one level past MAX_DEPTH, is refused before anything walks it."""
    path = tmp_path / "deep.yaml"
    path.write_text("x: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n", encoding="utf-8")
    _refused(path, f"nested too deeply (more than {MAX_DEPTH} levels)")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_infinite_numbers_are_refused(tmp_path: Path, value: str) -> None:
    """probes.interval_s: .nan would stop probing silently, .inf grace would wedge STOPPING."""
    _refused(_profile(tmp_path, f"probes:\n  interval_s: {value}\n"), "probes.interval_s: must be a finite")


def test_an_infinite_stop_grace_is_refused(tmp_path: Path) -> None:
    _refused(_profile(tmp_path, "stop:\n  grace_s: .inf\n"), "stop.grace_s: must be a finite")


def test_a_profile_name_with_a_trailing_newline_is_refused(tmp_path: Path) -> None:
    """`name: "p\\n"`: `$` would match before the newline; the whole name must match."""
    path = tmp_path / "nl.yaml"
    path.write_text(PROFILE.format(extra="").replace("name: p\n", 'name: "p\\n"\n', 1), encoding="utf-8")
    _refused(path, "name: profile names are [A-Za-z0-9][A-Za-z0-9_.-]*, at most 128 characters (got 'p\\n')")


def test_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (2 * 1024 * 1024) + "\n", encoding="utf-8")
    _refused(path, "is larger than 256 KiB")


@pytest.mark.skipif(os.geteuid() != 0, reason="the owner/mode rule applies to a daemon running as root")
def test_a_profile_others_may_edit_is_refused(tmp_path: Path) -> None:
    """A profile defines a privileged container: group/other-writable or not owned by root is refused."""
    path = _profile(tmp_path)
    path.chmod(0o666)
    _refused(path, "is writable by group or others (mode 0666)")
    path.chmod(0o644)
    os.chown(path, 65534, 65534)
    _refused(path, "is owned by uid 65534, not root")
    env = {**os.environ, TRUST_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr  # the documented override


def test_the_loaders_raise_config_errors_only(tmp_path: Path) -> None:
    """load_profile / load_config turn every bad file into a ConfigError naming the file."""
    bad = _profile(tmp_path)
    bad.write_bytes(b"name: \xff\n")
    for load in (load_profile, load_config):
        with pytest.raises(ConfigError) as info:
            load(bad)
        assert str(bad) in str(info.value)
        assert "not valid UTF-8" in str(info.value)

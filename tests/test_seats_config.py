"""Profile keys of seats and last known good, and the daemon config's checks across profiles."""

from __future__ import annotations

import io
from pathlib import Path

from supervisor.config import check_config, cli_check_config, load_config, load_profile
from tests.test_config import find, profile, write


def _prof(tmp_path: Path, name: str, extra: str = "", ports: str = "['127.0.0.1:8001:8000']") -> Path:
    body = f"name: {name}\n{extra}container:\n  image: img:1\n  ports: {ports}\n"
    return profile(tmp_path, body, f"{name}.yaml")


def _daemon(tmp_path: Path, names: list[str]) -> Path:
    return write(tmp_path / "d.yaml", f"profiles: [{', '.join(n + '.yaml' for n in names)}]\n")


def test_defaults_and_values_are_read(tmp_path: Path) -> None:
    """seat, rollback_after and on_failed_change: defaults (no seat, 2, hold) and values as written."""
    plain = load_profile(_prof(tmp_path, "a"))
    assert (plain.seat, plain.rollback_after, plain.on_failed_change) == (None, 2, "hold")
    extra = "seat: gpu0\nrollback_after: 3\non_failed_change: rollback\n"
    p = load_profile(_prof(tmp_path, "b", extra))
    assert (p.seat, p.rollback_after, p.on_failed_change) == ("gpu0", 3, "rollback")


def test_bad_values_are_errors_naming_key_and_value(tmp_path: Path) -> None:
    """A bad seat name, rollback_after out of range or not an integer, an unknown policy: each an error."""
    cases = {
        "seat: 'gpu 0'\n": ("seat", "'gpu 0'"),
        "seat: 3\n": ("seat", "3"),
        "rollback_after: 0\n": ("rollback_after", "0"),
        "rollback_after: 21\n": ("rollback_after", "21"),
        "rollback_after: two\n": ("rollback_after", "'two'"),
        "on_failed_change: revert\n": ("on_failed_change", "'revert'"),
    }
    for i, (extra, (key, value)) in enumerate(cases.items()):
        path = _prof(tmp_path, f"x{i}", extra)
        problem = find(check_config(path), key)
        assert problem.value == value, (extra, str(problem))
        assert problem.file == str(path)


def test_two_autostart_profiles_on_one_seat_name_both_files(tmp_path: Path) -> None:
    """Two autostart profiles on one seat: one error naming both files; autostart false on one is fine."""
    a = _prof(tmp_path, "a", "seat: gpu0\n")
    b = _prof(tmp_path, "b", "seat: gpu0\n")
    msg = find(check_config(_daemon(tmp_path, ["a", "b"])), "profiles").message
    assert "two autostart profiles on seat 'gpu0'" in msg
    assert str(a) in msg
    assert str(b) in msg
    _prof(tmp_path, "b", "seat: gpu0\nautostart: false\n")
    cfg = load_config(_daemon(tmp_path, ["a", "b"]))  # same port on one seat: fine
    assert [p.seat for p in cfg.profiles] == ["gpu0", "gpu0"]


def test_same_host_port_on_different_seats_is_an_error(tmp_path: Path) -> None:
    """One published host port in two profiles not sharing a seat: an error naming both files."""
    a = _prof(tmp_path, "a", "seat: gpu0\n")
    b = _prof(tmp_path, "b", "seat: gpu1\n", ports="['8001:8000']")  # all addresses covers 127.0.0.1
    c = _prof(tmp_path, "c", ports="['127.0.0.2:8001:8000', '127.0.0.1:8002:8000']")
    msg = find(check_config(_daemon(tmp_path, ["a", "b"])), "profiles").message
    assert "two profiles take host port 8001/tcp" in msg
    assert str(a) in msg
    assert str(b) in msg
    assert check_config(_daemon(tmp_path, ["a", "c"])) == []  # another address: no clash
    assert str(c) in find(check_config(_daemon(tmp_path, ["b", "c"])), "profiles").message


def test_host_network_same_port_is_an_error(tmp_path: Path) -> None:
    """Two host-network profiles listening on one --port (8000 when unset) clash; another port does not."""
    host = "container:\n  image: img:1\n  network_mode: host\n"
    a = profile(tmp_path, "name: a\n" + host, "a.yaml")
    b = profile(tmp_path, "name: b\n" + host + "  command: [--model, m, --port, '8000']\n", "b.yaml")
    profile(tmp_path, "name: c\n" + host + "  command: [--port, '8005']\n", "c.yaml")
    buf = io.StringIO()
    assert cli_check_config(_daemon(tmp_path, ["a", "b", "c"]), buf) == 1
    out = buf.getvalue()
    assert "two profiles take host port 8000/tcp" in out
    assert str(a) in out
    assert str(b) in out
    assert "c.yaml" not in out

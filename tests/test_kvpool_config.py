"""The kv_pool section of a profile: defaults, the redraw keys, and errors naming file, key and value."""

from __future__ import annotations

from pathlib import Path

from supervisor.config import KvPoolConfig, check_config, load_profile
from tests.test_config import MINIMAL, find, profile


def test_kv_pool_defaults_and_values(tmp_path: Path) -> None:
    """Absent: warn at 20 % drop, no floor, no redraw (min_tokens null), max_redraws 2; values are read."""
    assert load_profile(profile(tmp_path, MINIMAL)).kv_pool == KvPoolConfig(None, 20.0, None, 2)
    body = MINIMAL + "kv_pool:\n  warn_below_tokens: 0\n  warn_drop_pct: 100\n"
    body += "  min_tokens: 900000\n  max_redraws: 0\n"
    prof = load_profile(profile(tmp_path, body, "q.yaml"))
    assert prof.kv_pool == KvPoolConfig(0, 100.0, 900_000, 0)


def test_kv_pool_bad_values_name_file_key_and_value(tmp_path: Path) -> None:
    """Every bad kv_pool value is reported with the file, its dotted key path and the value."""
    body = MINIMAL + (
        "kv_pool:\n  warn_below_tokens: -1\n  warn_drop_pct: 120\n  min_tokens: lots\n  max_redraws: 11\n"
        "  max_redraw: 1\n"
    )
    f = profile(tmp_path, body)
    problems = check_config(f)
    below = find(problems, "kv_pool.warn_below_tokens")
    assert str(below) == f"{f}: kv_pool.warn_below_tokens: must not be negative (got -1)"
    assert find(problems, "kv_pool.warn_drop_pct").message == "must be <= 100"
    assert find(problems, "kv_pool.warn_drop_pct").value == "120"
    assert "must be an integer" in find(problems, "kv_pool.min_tokens").message
    assert find(problems, "kv_pool.min_tokens").value == "'lots'"
    assert find(problems, "kv_pool.max_redraws").message == "must be <= 10"
    assert "did you mean 'max_redraws'" in find(problems, "kv_pool.max_redraw").message
    assert len(problems) == 5


def test_kv_pool_negative_drop_and_redraws(tmp_path: Path) -> None:
    """A negative warn_drop_pct or max_redraws is refused."""
    body = MINIMAL + "kv_pool:\n  warn_drop_pct: -5\n  max_redraws: -1\n  min_tokens: -3\n"
    problems = check_config(profile(tmp_path, body))
    for key in ("warn_drop_pct", "max_redraws", "min_tokens"):
        assert find(problems, f"kv_pool.{key}").message == "must not be negative"
    assert len(problems) == 3

"""Pure rendering helpers of supervisorctl, with plain values."""

from __future__ import annotations

from supervisor.cli_render import (
    duration,
    relative,
    render_events,
    render_history,
    render_status,
    status_exit_code,
    status_row,
    thousands,
    to_epoch,
)

NOW = 1_790_000_000.0


def test_duration_and_relative() -> None:
    """Durations are compact and relative times say 'ago' or 'in'."""
    assert [duration(s) for s in (0, 45, 312, 3 * 3600 + 240, 2 * 86400 + 3 * 3600)] == [
        "0s",
        "45s",
        "5m12s",
        "3h04m",
        "2d03h",
    ]
    assert relative(NOW - 90, NOW) == "1m30s ago"
    assert relative(NOW + 7200, NOW) == "in 2h00m"
    assert relative(None, NOW) == "-"


def test_to_epoch_accepts_numbers_and_iso() -> None:
    """Timestamps may be epoch numbers or ISO 8601 strings; junk is None."""
    assert to_epoch(12.5) == 12.5
    assert to_epoch("1970-01-01T00:01:00Z") == 60.0
    assert to_epoch("yesterday") is None
    assert to_epoch(True) is None


def test_status_row_handles_missing_fields() -> None:
    """A profile with only name and state renders dashes, not errors."""
    row = status_row({"name": "m", "state": "STOPPED"}, NOW)
    assert row[:2] == ["m", "STOPPED"]
    assert set(row[2:]) == {"-"}


def test_kv_pool_comparison_and_breaker_list() -> None:
    """KV pool shows this start vs median with a signed change; emergencies may be a list of times."""
    row = status_row(
        {
            "name": "m",
            "state": "RUNNING",
            "kv_pool": {"tokens": 557_599, "median_tokens": 1_013_816},
            "breaker": {"state": "open", "emergencies": [1.0, 2.0, 3.0], "limit": 3},
            "last_probe": {"ok": False, "latency_ms": 5000, "at": None},
        },
        NOW,
    )
    assert "557,599 / 1,013,816 (-45%)" in row
    assert "OPEN 3/3" in row
    assert "FAIL 5000ms" in row


def test_status_exit_codes() -> None:
    """0 only when there are profiles and all are RUNNING."""
    assert status_exit_code([{"state": "RUNNING"}]) == 0
    assert status_exit_code([{"state": "RUNNING"}, {"state": "DEGRADED"}]) == 3
    assert status_exit_code([]) == 3


def test_render_empty() -> None:
    """Empty lists render a readable placeholder."""
    assert render_status({"daemon": {"pid": 1}, "profiles": []}, NOW).endswith("(no profiles)")
    assert render_events([]) == "(no events)"
    assert render_history([]) == "(no starts recorded)"
    assert thousands("x") == "-"


def test_history_shows_the_failure_diagnosis_cut_to_width() -> None:
    """A failed start's diagnosis appears in the history table, cut to a readable width."""
    long = "vLLM ran out of memory in the driver: " + "x" * 200
    out = render_history(
        [
            {"ts": NOW, "outcome": "ready", "kv_tokens": 557599, "max_concurrency": 2.13, "load_s": 300},
            {"ts": NOW, "outcome": "failed_engine_init", "diagnosis": long},
        ]
    )
    lines = out.splitlines()
    assert "DIAGNOSIS" in lines[0]
    assert "557,599" in lines[1]
    assert lines[1].rstrip().endswith("-")
    assert "vLLM ran out of memory in the driver" in lines[2]
    assert lines[2].rstrip().endswith("...")
    assert long not in out

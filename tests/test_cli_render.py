"""Pure rendering helpers of supervisorctl, with plain values."""

from __future__ import annotations

import time

from supervisor.cli.common import status_exit_code
from supervisor.cli.render import (
    kv_trend,
    relative,
    render_events,
    render_history,
    render_status,
    status_row,
    thousands,
    to_epoch,
)

NOW = 1_790_000_000.0


def test_duration_and_relative() -> None:
    """Durations read as everywhere else (core.clock.format_duration); relative times say 'ago' or 'in'."""
    assert relative(NOW - 90, NOW) == "1 min ago"
    assert relative(NOW + 7200, NOW) == "in 2 h"
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
            "kv_pool": {"tokens": 557_599, "baseline_tokens": 1_013_816},
            "breaker": {"state": "open", "emergencies": [1.0, 2.0, 3.0], "limit": 3},
            "last_probe": {"ok": False, "latency_ms": 5000, "at": None},
        },
        NOW,
    )
    assert "557,599 / 1,013,816 (-45%)" in row
    assert "OPEN 3/3" in row
    assert "FAIL 5000ms" in row


def test_status_exit_codes() -> None:
    """0 when every profile that should run is RUNNING; a profile stopped on purpose does not count."""
    assert status_exit_code([{"state": "RUNNING"}]) == 0
    assert status_exit_code([{"state": "RUNNING"}, {"state": "DEGRADED"}]) == 3
    assert status_exit_code([]) == 3
    stopped = {"state": "STOPPED", "intent": "stop"}
    assert status_exit_code([{"state": "RUNNING", "intent": "run"}, stopped]) == 0
    assert status_exit_code([stopped]) == 0
    assert status_exit_code([{"state": "STOPPED", "intent": "run"}, stopped]) == 3
    assert status_exit_code([{"state": "FATAL", "intent": "run"}]) == 3


def test_status_shows_auth_slot_and_weekday_of_next_maintenance() -> None:
    """AUTH column, the load slot holder on the daemon line, next maintenance as local weekday + time."""
    at = NOW + 2 * 86400 + 3 * 3600 + 60
    doc = {
        "daemon": {"pid": 1, "version": "x", "uptime_s": 5, "load_slot": "m1"},
        "profiles": [{"name": "m1", "state": "STARTING", "auth": "enforced", "next_maintenance": at}],
    }
    text = render_status(doc, NOW)
    assert "load slot: m1" in text
    assert "AUTH" in text.splitlines()[1]
    row = text.splitlines()[2]
    assert "enforced" in row
    assert time.strftime("%a %m-%d %H:%M", time.localtime(at)) + " (in 2 d 3 h)" in row
    free = render_status(
        {"daemon": {"load_slot": None}, "profiles": [{"name": "m1", "state": "X", "auth": None}]}, NOW
    )
    assert "load slot: free" in free
    assert "unknown" in free.splitlines()[-1]


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
    lines = out.splitlines()[1:]  # below the sparkline
    assert "DIAGNOSIS" in lines[0]
    assert "557,599" in lines[1]
    assert lines[1].rstrip().endswith("-")
    assert "vLLM ran out of memory in the driver" in lines[2]
    assert lines[2].rstrip().endswith("...")
    assert long not in out


IMAGE = "sha256:4f1c0d8e9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d"


def cells(line: str, header: str) -> dict[str, str]:
    """The cells of a table line by the column starts in its header (columns are left-aligned)."""
    names = [
        "WHEN", "OUTCOME", "KV TOKENS", "KV GIB", "MAX CONC", "MODEL GIB", "LOAD TIME", "GMU",
        "MEMAVAIL BEFORE", "IMAGE", "FINGERPRINT", "ACTUAL USAGE", "DECODE TOK/S", "DIAGNOSIS",
    ]  # fmt: skip
    starts = [header.index(n) for n in names]
    ends = [*starts[1:], None]
    return {n: line[a:b].strip() for n, a, b in zip(names, starts, ends, strict=True)}


def test_history_sparkline_and_new_ledger_fields() -> None:
    """The pool per start as a sparkline on top; new ledger fields per row; older rows show dashes."""
    new = {"kv_gib": 52.13, "model_gib": 17.3, "gmu": 0.73, "image_id": IMAGE, "fingerprint": "0123456789ab"}
    new["usage"] = {"free_at_start": 112.4, "consumed": 19.84, "activation": 3.1, "cuda_graph": 0.95}
    records = [
        {"ts": NOW - 300, "outcome": "ready", "kv_tokens": 1_013_816, "max_concurrency": 4.08, "load_s": 742},
        {"ts": NOW - 200, "outcome": "ready", "kv_tokens": 1_013_816, **new},
        {"ts": NOW - 150, "outcome": "failed_oom", "kv_tokens": None, **new},
        {"ts": NOW - 100, "outcome": "ready", "kv_tokens": 557_599, "load_s": 301.5, **new},
    ]
    trend, header, old, row, failed, small = render_history(records).splitlines()
    assert trend == "KV pool  ██·▅  min 557,599  max 1,013,816  last 557,599"
    old_cells = cells(old, header)
    assert old_cells["KV TOKENS"] == "1,013,816"
    assert old_cells["MAX CONC"] == "4.08x"
    for column in ("KV GIB", "MODEL GIB", "GMU", "IMAGE", "FINGERPRINT"):
        assert old_cells[column] == "-", column
    assert cells(small, header) | {"WHEN": ""} == {
        "WHEN": "",
        "OUTCOME": "ready",
        "KV TOKENS": "557,599",
        "KV GIB": "52.1",
        "MAX CONC": "-",
        "MODEL GIB": "17.3",
        "LOAD TIME": "5 min",
        "GMU": "0.73",
        "MEMAVAIL BEFORE": "-",
        "IMAGE": "4f1c0d8e9a7b",
        "FINGERPRINT": "0123456789ab",
        "ACTUAL USAGE": "consumed 19.84 / activation 3.1 / graphs 0.95 GiB",
        "DECODE TOK/S": "-",
        "DIAGNOSIS": "-",
    }
    assert cells(failed, header)["KV TOKENS"] == "-"
    assert cells(row, header)["IMAGE"] == "4f1c0d8e9a7b"


def test_kv_trend_without_any_pool() -> None:
    """Starts that never got a pool are dots and no min/max is claimed."""
    records: list[dict[str, object]] = [
        {"outcome": "failed_oom"},
        {"outcome": "failed_oom", "kv_tokens": True},
    ]
    assert kv_trend(records) == "KV pool  ··"


def test_a_recorded_running_not_yet_observed_is_not_exit_0() -> None:
    """A restarted daemon shows the recorded RUNNING before Docker answered: exit 3 and a '?' mark."""
    from supervisor.cli.common import status_exit_code
    from supervisor.cli.render import render_status

    seen = {"name": "m", "state": "RUNNING", "observed": True}
    unseen = {"name": "m", "state": "RUNNING", "observed": False}
    assert status_exit_code([seen]) == 0
    assert status_exit_code([unseen]) == 3
    text = render_status(
        {
            "daemon": {"docker": {"state": "not answering", "since_local": "16:40", "error": "hung"}},
            "profiles": [unseen],
        },
        0.0,
    )
    assert "RUNNING?" in text
    assert "docker: not answering since 16:40 (hung)" in text


def test_status_shows_the_liveness_verdict_and_its_signal() -> None:
    """A serving profile's forward-progress verdict and what it rests on; none for a stopped one."""
    from supervisor.cli.render import liveness_line

    live = {"verdict": "busy", "signal": "prompt_tokens+cpu", "prefill_rate": 1750.4}
    line = liveness_line({"name": "qwen", "state": "RUNNING", "liveness": live})
    assert line == "\nliveness qwen: busy (prompt_tokens+cpu), prefill 1750 tokens/s"
    stuck = {"verdict": "stuck", "signal": "/health failing", "prefill_rate": None}
    assert liveness_line({"name": "q", "state": "DEGRADED", "liveness": stuck}) == (
        "\nliveness q: STUCK (/health failing)"
    )
    assert liveness_line({"name": "q", "state": "STOPPED", "liveness": live}) == ""


def test_status_shows_an_applied_kv_pin_as_a_config_change() -> None:
    """kv_pool.pin apply: the state gets PIN while the container runs with it, and a config-change line."""
    pin = {"kv_pool": {"pin": {"bytes": 51_321_110_528, "running": True}}}
    text = render_status({"daemon": {}, "profiles": [{"name": "m1", "state": "RUNNING", **pin}]}, NOW)
    assert (
        "config change: m1 starts with --kv-cache-memory-bytes 51321110528 (kv_pool.pin apply; running)"
        in text
    )
    assert "RUNNING PIN" in text.splitlines()[-1]
    nxt = {"kv_pool": {"pin": {"bytes": 51_321_110_528, "running": False}}}
    text = render_status({"daemon": {}, "profiles": [{"name": "m1", "state": "RUNNING", **nxt}]}, NOW)
    assert "(kv_pool.pin apply; from the next start)" in text
    assert "PIN" not in text.splitlines()[-1]
    plain = render_status({"daemon": {}, "profiles": [{"name": "m1", "state": "RUNNING"}]}, NOW)
    assert "config change" not in plain


def test_history_shows_decode_speed_per_start_and_status_shows_slow() -> None:
    """The sentinel's median canary of each start is a history column; SLOW follows the state."""
    out = render_history(
        [{"ts": NOW, "outcome": "ready", "decode_tps": 33.25}, {"ts": NOW, "outcome": "ready"}]
    )
    lines = out.splitlines()[1:]
    assert "DECODE TOK/S" in lines[0]
    assert "33.2" in lines[1]
    row = status_row({"name": "p", "state": "RUNNING", "sentinel": {"slow": True}}, NOW)
    assert row[1] == "RUNNING SLOW"
    assert status_row({"name": "p", "state": "RUNNING", "sentinel": {"slow": False}}, NOW)[1] == "RUNNING"

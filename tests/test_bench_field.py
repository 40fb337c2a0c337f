"""bench.compare's field rows without Docker: counting, tables, what each tool did."""

from __future__ import annotations

from types import SimpleNamespace

from bench.compare import FAULTS, LIMIT_S, UNITS, did_lines
from bench.compare_field import FIELD_FAULTS, deaths_after
from bench.compare_real import REAL_FAULTS, SKIPPED
from bench.compare_render import table


def test_every_field_row_is_run_limited_and_run_or_skipped_on_the_real_server() -> None:
    assert set(FIELD_FAULTS) <= set(FAULTS)
    assert all(0 < LIMIT_S[f] <= 120 for f in FIELD_FAULTS)  # every row bounded
    # the real section runs a row (engine_spinning: the spin overlay) or says why not, never a row of errors
    assert "engine_spinning" in REAL_FAULTS
    for f in FIELD_FAULTS:
        assert (f in REAL_FAULTS) != (f in SKIPPED), f


def test_deaths_are_counted_in_the_window_only() -> None:
    exits = SimpleNamespace(t0=1000.0, deaths={"c": [[1.0, 137], [5.0, 137], [30.0, 0]], "d": []})
    assert deaths_after(exits, "c", 1004.0, 1010.0) == 1
    assert deaths_after(exits, "c", 1000.0, 1100.0) == 3
    assert deaths_after(exits, "d", 1000.0, 1100.0) == 0
    assert deaths_after(exits, "gone", 1000.0, 1100.0) == 0


def test_counts_render_as_counts_and_each_tool_says_what_it_did() -> None:
    section = {
        "faults": {
            "healthy_boot_nv_err": {"a": 2.0, "b": 0.0},
            "daemon_killed_mid_load": {"a": 0.0, "b": None},
        },
        "trials": {
            "healthy_boot_nv_err": {"a": [2.0], "b": [0.0]},
            "daemon_killed_mid_load": {"a": [0.0], "b": [None]},
        },
        "units": UNITS,
        "skipped": {},
    }
    lines = table(section, ("a", "b")).splitlines()
    assert lines[2] == "| `healthy_boot_nv_err` (false kills) | 2 (1/1) | 0 (1/1) |"
    assert lines[3] == "| `daemon_killed_mid_load` (loads lost) | 0 (1/1) | - (0/1) |"
    result = {
        "details": {
            "healthy_boot_nv_err": [{"measure": {"did": {"a": "killed a healthy load (2x)", "b": "nothing"}}}]
        }
    }
    assert did_lines(result) == ["healthy_boot_nv_err did: a: killed a healthy load (2x); b: nothing"]

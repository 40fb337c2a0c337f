"""The suite's parallel run (docs/testing.md "Running in parallel"): a real inner pytest on 3 xdist workers
with this suite's grouping hook; the real-vLLM tests and a module-scoped fixture's tests each share one
worker, the rest carry no group (on a loaded box one worker may still run them all: seen in CI)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import (
    REAL_VLLM_MODULE_S,
    REAL_VLLM_ONE_CORE,
    REAL_VLLM_SHARED_SERVER,
    engine_cpus,
    real_vllm_groups,
)
from tests.harness import REPO

CONFTEST = "from tests.conftest import pytest_collection_modifyitems as pytest_collection_modifyitems\n"
INI = "[pytest]\nmarkers =\n    real_vllm: x\n    xdist_group: x\n"
RECORD = """
import json, os, pytest

def record(tag, request):
    with open(os.environ["VSUP_RECORD"], "a") as f:
        f.write(json.dumps([tag, request.node.nodeid, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""
TESTS = {
    "test_real.py": RECORD
    + """
pytestmark = pytest.mark.real_vllm

@pytest.mark.parametrize("i", range(4))
def test_r(i, request):
    record("real", request)
""",
    "test_shared.py": RECORD
    + """
@pytest.fixture(scope="module")
def box():
    return object()

@pytest.mark.parametrize("i", range(4))
def test_s(i, box, request):
    record("shared", request)
""",
    "test_free.py": RECORD
    + """
@pytest.mark.parametrize("i", range(8))
def test_f(i, request):
    record("free", request)
""",
}


def test_groups_share_a_worker_and_the_rest_spreads(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(INI)
    for name, text in TESTS.items():
        (tmp_path / name).write_text(text)
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO), "VSUP_RECORD": str(record)}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for tag, nodeid, worker in rows:
        workers.setdefault(tag, set()).add(worker)
        if tag == "real":
            assert nodeid.endswith("@real_vllm_0"), nodeid
        if tag == "shared":
            assert nodeid.endswith("@test_shared.py"), nodeid
        if tag == "free":  # no group: xdist may deal them to any worker (which ones is its affair and load's)
            assert "@" not in nodeid, nodeid
    assert len(rows) == 16
    assert len(workers["real"]) == 1
    assert len(workers["shared"]) == 1


def test_real_vllm_modules_are_split_evenly_an_unlisted_one_counting_the_default() -> None:
    """Two groups: the two longest modules apart, the rest evening them out (an unlisted module counts
    REAL_VLLM_DEFAULT_S = 30); one group takes all. Plain weights, not the measured table."""
    seconds = {"a.py": 400, "b.py": 300, "c.py": 200, "d.py": 50}
    mods = [*seconds, "new.py"]
    two = real_vllm_groups(mods, 2, seconds)
    # 400 + 50 + 30 = 480 against 300 + 200 = 500: no split has a lighter heaviest group
    assert two == {
        "a.py": "real_vllm_0",
        "b.py": "real_vllm_1",
        "c.py": "real_vllm_1",
        "d.py": "real_vllm_0",
        "new.py": "real_vllm_0",
    }
    assert set(real_vllm_groups(mods, 1, seconds).values()) == {"real_vllm_0"}


def test_real_vllm_modules_are_split_so_the_heaviest_group_is_lightest() -> None:
    """Where dealing longest first to the lightest group ends 7 against 5 (3+2+2 | 3+2), every split is
    tried and 6 against 6 found (3+3 | 2+2+2)."""
    seconds = {"a.py": 3, "b.py": 3, "c.py": 2, "d.py": 2, "e.py": 2}
    groups = real_vllm_groups(list(seconds), 2, seconds)
    loads = {g: sum(seconds[m] for m, x in groups.items() if x == g) for g in set(groups.values())}
    assert sorted(loads.values()) == [6, 6], groups
    assert groups["a.py"] == groups["b.py"] == "real_vllm_0"


def test_the_modules_of_the_shared_server_are_dealt_to_one_group() -> None:
    """The session's tiny server is made once per worker: every module using it lands in one group, even
    with a module of its own weight between them."""
    shared = list(REAL_VLLM_SHARED_SERVER)
    # dealt alone, the lighter shared module would go to the group the heavier one did not
    others = ["tests/test_daemon_real_liveness.py", "tests/test_conformance.py"]
    for at_once in (2, 3):
        groups = real_vllm_groups([*shared, *others], at_once)
        assert len({groups[m] for m in shared}) == 1, groups


def test_the_modules_that_compute_for_minutes_are_dealt_to_one_group() -> None:
    """Two real servers computing at once share core 0 (vLLM's OpenMP binding): the modules of
    REAL_VLLM_ONE_CORE land in one group whatever else is dealt, and the whole suite's deal stays even."""
    for at_once in (2, 3):
        groups = real_vllm_groups(list(REAL_VLLM_MODULE_S), at_once)
        assert len({groups[m] for m in REAL_VLLM_ONE_CORE}) == 1, groups
    groups = real_vllm_groups(list(REAL_VLLM_MODULE_S), 2)
    loads = [
        sum(s for m, s in REAL_VLLM_MODULE_S.items() if groups[m] == g)
        for g in ("real_vllm_0", "real_vllm_1")
    ]
    assert max(loads) - min(loads) <= 0.05 * sum(loads), loads


def _marks_real_vllm(source: str) -> bool:
    """Whether a test module's code (not its strings) names ``pytest.mark.real_vllm``."""
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "real_vllm"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        for node in ast.walk(ast.parse(source))
    )


def test_every_real_vllm_module_has_its_measured_seconds() -> None:
    """The groups are dealt by REAL_VLLM_MODULE_S: a real-vLLM module missing from it counts
    REAL_VLLM_DEFAULT_S (30 s), and one of 196 s counted so had left the groups 1248 s against ~760 s in the
    run of 2026-12-05 on 9e21941 (test_daemon_real_vllm_same_cause.py). List a new module's seconds."""
    modules = {
        f"tests/{p.name}"
        for p in sorted((REPO / "tests").glob("test_*.py"))
        if _marks_real_vllm(p.read_text(encoding="utf-8"))
    }
    assert "tests/test_conformance.py" in modules  # the scan finds the marks
    assert "tests/test_parallel.py" not in modules  # only a string of it names the mark
    assert sorted(modules - set(REAL_VLLM_MODULE_S)) == []
    assert sorted(set(REAL_VLLM_MODULE_S) - modules) == []  # and none that is gone


def test_each_real_group_binds_its_engines_to_its_own_core() -> None:
    """real_vllm_N -> the N-th usable CPU (round the list); other groups and one-CPU boxes: vLLM's own."""
    assert [engine_cpus(f"real_vllm_{n}", [0, 1]) for n in range(3)] == ["0", "1", "0"]
    assert engine_cpus("real_vllm_1", [2, 5]) == "5"
    assert engine_cpus("tests/test_x.py", [0, 1]) is None
    assert engine_cpus(None, [0, 1]) is None
    assert engine_cpus("real_vllm_1", [0]) is None

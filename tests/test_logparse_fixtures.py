"""Real vLLM log excerpts (fixtures/vllm-logs) parse to what their INDEX.md says."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from supervisor.core.vllm.analyzer import REPORT_KEYS, LogAnalyzer


def fixtures_root() -> Path | None:
    """tests/fixtures in the checkout, else $VSUP_FIXTURES."""
    cands = [Path(__file__).parent / "fixtures", Path(os.environ.get("VSUP_FIXTURES", "/nonexistent"))]
    return next((c for c in cands if (c / "vllm-logs").is_dir()), None)


ROOT = fixtures_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="fixtures/vllm-logs not found (set VSUP_FIXTURES)")

# INDEX.md "expected parse" column, as values (numbers are numbers).
EXPECTED: dict[str, dict[str, Any]] = {
    "004-v0.10-enginecore-dp0-kv-cache.log": {
        "proc": "EngineCore_DP0",
        "available_kv_gib": 6.51,
        "kv_tokens": 42656,
        "max_model_len": 32768,
        "max_concurrency": 1.30,
    },
    "015-enginedead-docker-compose-500s.log": {"outcome": "engine_dead", "http_500_count": 2},
    "020-v0.9-success-startup-kv-graph-init-server.log": {
        "kv_tokens": 1131008,
        "max_model_len": 131072,
        "max_concurrency": 8.63,
        "graph_capture_s": 37,
        "graph_gib": 0.45,
        "init_engine_s": 90.84,
        "num_gpu_blocks": 70688,
        "listen_url": "http://0.0.0.0:8000",
        "outcome": "starting",
    },
    "024-shutdown-sigint-drain-mode-new-logs.log": {
        "outcome": "shutdown",
        "signal": "SIGINT",
        "mode": "drain",
        "timeout_s": 15,
    },
    "026-oom-during-serving-enginecore-then-output-handler.log": {
        "outcome": "engine_dead",
        "cause": "oom",
        "oom_tried_mib": 50.00,
        "gpu_total_gib": 23.56,
        "gpu_free_mib": 21.75,
    },
    "029-shards-progress-worker-prefix-own-line.log": {
        "shards_done": 27,
        "shards_total": 85,
        "shards_pct": 32,
    },
    "033-v0.11-success-kv-cudagraph-bars-init-engine.log": {
        "proc": "EngineCore_DP0",
        "available_kv_gib": 16.23,
        "kv_tokens": 425424,
        "max_model_len": 65536,
        "max_concurrency": 6.49,
        "graph_capture_s": 7,
        "graph_gib": 0.95,
        "init_engine_s": 25.99,
        "num_gpu_blocks": 26589,
    },
    "040-v0.9.1-free-memory-less-than-desired-then-failed-to-start.log": {
        "outcome": "failed_gpu_mem_util",
        "free_gib": 31.44,
        "total_gib": 47.38,
        "util": 0.95,
        "requested_gib": 45.01,
    },
    "050-v0.32-cpu-shm-64m-insufficient-dev-shm.log": {
        "outcome": "failed_shm",
        "cause": "shm",
        "shm_required_mib": 160.0,
        "shm_free_mib": 64.0,
        "last_exception": "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: "
        "160 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
    },
    "051-v0.32-cpu-max-model-len-above-derived.log": {
        "outcome": "failed_config",
        "cause": "config",
        "config_class": "ModelConfig",
        "last_phase": "api_server_starting",
        "config_error": "User-specified max_model_len (100000) is greater than the derived max_model_len "
        "(max_position_embeddings=1024.0 or model_max_length=None in model's config.json).",
    },
    "052-v0.32-cpu-empty-model-directory.log": {
        "outcome": "failed_config",
        "cause": "config",
        "config_class": "ModelConfig",
        "config_error": "Invalid repository ID or local directory specified: '/models/tiny'.",
    },
    "053-v0.32-cpu-argparse-key-value-starting-with-dash.log": {
        "outcome": "failed_config",
        "cause": "config",
        "config_error": "argument error: unrecognized arguments: <secret>",
    },
    "054-v0.32-cpu-argparse-api-key-expects-a-value.log": {
        "outcome": "failed_config",
        "cause": "config",
        "config_error": "argument error: argument --api-key: expected at least one argument",
    },
    "055-v0.32-cpu-worker-died-on-first-request.log": {
        "outcome": "engine_dead",
        "cause": None,
        "engine_dead_detail": "Worker proc VllmWorker-0 died unexpectedly",
        "http_500_count": 1,
        "requests_served": 0,
        "last_exception": "RuntimeError: cancelled",
        "last_phase": "uvicorn_starting",
    },
}


def fixture_lines(path: Path) -> list[str]:
    """The excerpt without its two header lines (`# source:` and `# version:`)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# source:")
    assert lines[1].startswith("# version:")
    return lines[2:]


def test_every_indexed_fixture_has_an_expectation() -> None:
    """Each file INDEX.md lists is covered here, so a new fixture cannot be silently untested."""
    assert ROOT is not None
    index = (ROOT / "vllm-logs" / "INDEX.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| (\S+\.log) \|", index, flags=re.MULTILINE))
    assert listed, "INDEX.md lists no fixtures"
    assert listed == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_parses_as_indexed(name: str) -> None:
    """The analyzer's report holds INDEX.md's expected values, with numbers as numbers."""
    assert ROOT is not None
    analyzer = LogAnalyzer()
    for line in fixture_lines(ROOT / "vllm-logs" / name):
        analyzer.feed(line)
    report = analyzer.report()
    for key, want in EXPECTED[name].items():
        got = report[key]
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, (key, got, want)
        if isinstance(want, (int, float)):
            assert isinstance(got, (int, float)), (key, got)
            assert not isinstance(got, bool), (key, got)


def test_fixture_reports_have_every_design_key() -> None:
    """Every docs/contract.md "vllm" key is present in the report (None when the log does not say)."""
    assert ROOT is not None
    analyzer = LogAnalyzer()
    for line in fixture_lines(ROOT / "vllm-logs" / "004-v0.10-enginecore-dp0-kv-cache.log"):
        analyzer.feed(line)
    report = analyzer.report()
    assert set(REPORT_KEYS) <= set(report)
    assert report["free_gib"] is None

"""LogAnalyzer (cause ranking, boots, hard wraps, ready/dead/shutdown) and the log-marker matcher."""

# ruff: noqa: E501  -- verbatim log/exposition lines read better unsplit

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.core.vllm.analyzer import KvPool, LogAnalyzer, StartupFailure, marker_matcher
from supervisor.core.vllm.envelope import split_line
from supervisor.core.vllm.signals import BOOT_START_PHASES, Phase, match_message

LOGS = Path(__file__).parent / "fixtures" / "vllm-logs"

E = "(EngineCore_DP0 pid=20) ERROR 06-30 13:53:19 [core.py:515] "
A = "(APIServer pid=1) ERROR 06-30 13:53:20 [api_server.py:1] "
INIT_FAILED = (
    A + "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)
OOM = E + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB."
FREE = E + (
    "ValueError: Free memory on device (115.17/122.86 GiB) on startup is less than desired GPU memory "
    "utilization (0.95, 116.72 GiB). Decrease GPU memory utilization"
)
KV = E + (
    "ValueError: To serve at least one request with the model's max seq len (262144), (24.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (10.50 GiB). Based on the available memory, "
    "the estimated maximum model length is 114688."
)
NO_KV = E + "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
CORE_FAILED = E + "EngineCore failed to start."
BOOT_OK = [
    "(APIServer pid=1) INFO 10-21 09:10:00 [api_server.py:1] vLLM API server version 0.11.0",
    "(EngineCore_DP0 pid=20) INFO 10-21 09:10:01 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: x",
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:10<00:00,  2.5s/it]",
    "(EngineCore_DP0 pid=20) INFO 10-21 09:11:57 [gpu_worker.py:298] Available KV cache memory: 16.23 GiB",
    "(EngineCore_DP0 pid=20) INFO 10-21 09:11:57 [kv_cache_utils.py:1087] GPU KV cache size: 425,424 tokens",
    "(EngineCore_DP0 pid=20) INFO 10-21 09:11:57 [kv_cache_utils.py:1091] Maximum concurrency for 65,536 tokens "
    "per request: 6.49x",
    "(APIServer pid=1) INFO 10-21 09:12:14 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
    "(APIServer pid=1) INFO:     Application startup complete.",
]


def run(lines: list[str]) -> dict[str, object]:
    a = LogAnalyzer()
    for ln in lines:
        a.feed(ln)
    return a.report()


@pytest.mark.parametrize(
    ("lines", "outcome"),
    [
        ([INIT_FAILED, CORE_FAILED, NO_KV, KV, FREE, OOM], "failed_oom"),
        ([OOM, CORE_FAILED, INIT_FAILED], "failed_oom"),
        ([CORE_FAILED, FREE, KV, NO_KV, INIT_FAILED], "failed_gpu_mem_util"),
        ([NO_KV, KV, INIT_FAILED], "failed_kv_insufficient"),
        ([NO_KV, CORE_FAILED, INIT_FAILED], "failed_no_kv_memory"),
        ([CORE_FAILED, INIT_FAILED], "failed_engine_init"),
    ],
)
def test_most_specific_cause_wins(lines: list[str], outcome: str) -> None:
    """OOM > free memory at start > KV insufficient > no KV memory > generic init failure, in any order."""
    report = run(lines)
    assert report["outcome"] == outcome
    assert report["cause"] == outcome.removeprefix("failed_")


def test_kv_insufficient_numbers() -> None:
    """The KV-insufficient failure reports the needed/available memory and the estimated max length."""
    report = run([KV, INIT_FAILED])
    assert (report["max_model_len"], report["needed_kv_gib"], report["available_kv_gib"]) == (
        262144,
        24.0,
        10.5,
    )
    assert report["estimated_max_model_len"] == 114688


def test_ready_boot_reports_pool_and_proc() -> None:
    """A clean boot is ready, with the pool of the engine-core process and the listen URL."""
    report = run(BOOT_OK)
    assert report["outcome"] == "ready"
    assert (report["kv_tokens"], report["max_model_len"], report["max_concurrency"]) == (425424, 65536, 6.49)
    assert report["proc"] == "EngineCore_DP0"
    assert report["version"] == "0.11.0"
    assert report["listen_url"] == "http://0.0.0.0:8000"
    assert (report["shards_done"], report["shards_total"]) == (4, 4)


def test_several_boots_describe_the_last() -> None:
    """A failed boot then a good one: the report is the good one, no leftovers of the first."""
    first = [*BOOT_OK[:2], FREE, INIT_FAILED]
    second = [ln.replace("425,424", "557,599") for ln in BOOT_OK]
    report = run(first + second)
    assert report["outcome"] == "ready"
    assert report["kv_tokens"] == 557599
    assert report["free_gib"] is None
    assert report["boots"] == 2
    back = run(second + first)
    assert back["outcome"] == "failed_gpu_mem_util"
    assert back["kv_tokens"] is None


def _late_banner(lines: list[str], every: bool) -> list[str]:
    """The log as Docker may store it: boot-start lines (banner, ``non-default args``) moved past the
    refusal's traceback (stdout and stderr are copied apart, and the simulator's log showed up to 10 banner
    lines stored after the whole traceback). ``every``: the whole stdout block before the traceback (every
    ``(APIServer ...)`` line, start lines included) is stored after it (seen in CI); else all start lines
    but the first."""
    tb = lines.index("Traceback (most recent call last):")
    if every:
        late = [i for i, ln in enumerate(lines[:tb]) if split_line(ln)[0] is not None]
    else:
        starts = [
            i
            for i, ln in enumerate(lines)
            if isinstance(sig := match_message(split_line(ln)[3])[0], Phase) and sig.name in BOOT_START_PHASES
        ]
        late = [i for i in starts[1:] if i < tb]
    assert late, "the fixture must have boot-start lines to move"
    return [*(ln for i, ln in enumerate(lines) if i not in late), *(lines[i] for i in late)]


@pytest.mark.parametrize("every", [False, True], ids=["all-but-the-first", "every-stdout-line"])
@pytest.mark.parametrize(
    "fixture", ["051-v0.32-cpu-max-model-len-above-derived.log", "052-v0.32-cpu-empty-model-directory.log"]
)
def test_banner_lines_stored_after_the_refusal_are_the_same_boot(fixture: str, every: bool) -> None:
    """Real 0.32 refusals with their late banner lines stored after the traceback (Docker keeps each
    stream's order, not the order between them): still one boot, failed_config with vLLM's reason."""
    lines = (LOGS / fixture).read_text(encoding="utf-8").splitlines()[2:]
    in_order, reordered = run(lines), run(_late_banner(lines, every))
    assert in_order["outcome"] == "failed_config"
    assert reordered["boots"] == 1
    for key in ("outcome", "cause", "config_class", "config_error"):
        assert reordered[key] == in_order[key], key


def test_an_argument_error_then_a_banner_is_a_new_boot() -> None:
    """argparse refuses before the banner, so a start line after its error is the next start's."""
    refused = [
        "api_server.py: error: argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"
    ]
    assert run(refused)["outcome"] == "failed_config"
    report = run([*refused, *BOOT_OK])
    assert (report["outcome"], report["boots"]) == ("ready", 2)


def test_a_start_line_repeated_after_progress_is_a_new_boot() -> None:
    """The same banner line again after progress is the server starting again; a log cut mid-boot (no
    start line yet) ends at the first start line after its progress."""
    failed = [*BOOT_OK[:2], FREE, INIT_FAILED]
    assert run(failed + failed)["boots"] == 2
    cut = BOOT_OK[2:5]  # weights and KV pool, no banner: the log began mid-boot
    report = run([*cut, *failed])
    assert report["boots"] == 2
    assert report["kv_tokens"] is None


def test_engine_death_after_ready_and_shutdown_after_death() -> None:
    """Death after ready is engine_dead even though uvicorn then shuts down cleanly (exit 0)."""
    dead = [
        *BOOT_OK,
        "(EngineCore_DP0 pid=20) ERROR 10-21 10:00:00 [core.py:1] EngineCore encountered a fatal error.",
        "(APIServer pid=1) ERROR 10-21 10:00:00 [async_llm.py:1] AsyncLLM output_handler failed.",
        "(APIServer pid=1) INFO:     Shutting down",
        "(APIServer pid=1) INFO:     Application shutdown complete.",
    ]
    report = run(dead)
    assert report["outcome"] == "engine_dead"
    assert report["cause"] is None
    assert run([*BOOT_OK, "(APIServer pid=1) INFO:     Shutting down"])["outcome"] == "shutdown"


def test_sigterm_before_ready_is_shutdown() -> None:
    """SIGTERM during load (KeyboardInterrupt: terminated) is a shutdown, signal SIGTERM."""
    report = run([*BOOT_OK[:3], "KeyboardInterrupt: terminated"])
    assert (report["outcome"], report["signal"]) == ("shutdown", "SIGTERM")


def test_empty_and_unrelated_logs() -> None:
    """No vLLM lines -> outcome none; progress only -> starting."""
    assert run([])["outcome"] == "none"
    assert run(["hello world", "another line"])["outcome"] == "none"
    assert run(BOOT_OK[:3])["outcome"] == "starting"


def test_hard_wrapped_failure_line_is_joined() -> None:
    """A terminal-wrapped KV-insufficient message is recovered by joining the pieces."""
    full = KV.split("] ", 1)[1]
    cut = full.index("KV cach") + len("KV cach")
    a = LogAnalyzer()
    first = a.feed(E + full[:cut])
    second = a.feed(full[cut:])
    assert isinstance(first, StartupFailure)
    assert "needed_kv_gib" not in first.detail
    assert isinstance(second, StartupFailure)
    assert second.detail["needed_kv_gib"] == 24.0
    assert a.report()["estimated_max_model_len"] == 114688


def test_two_line_kv_format_feeds_both_parts() -> None:
    """Pre-0.28 two-line KV format: tokens then len/concurrency, both KvPool, merged in the report."""
    a = LogAnalyzer()
    s1 = a.feed(BOOT_OK[4])
    s2 = a.feed(BOOT_OK[5])
    assert s1 == KvPool(425424, None, None, "GPU")
    assert s2 == KvPool(None, 65536, 6.49, None)
    assert a.report()["kv_tokens"] == 425424


def test_v0_blocks_give_tokens_when_no_token_line() -> None:
    """V0 logs only print blocks: kv_tokens = gpu_blocks x 16, blocks reported as numbers."""
    report = run(["INFO 10-17 12:00:00 gpu_executor.py:122] # GPU blocks: 2000, # CPU blocks: 512"])
    assert (report["gpu_blocks"], report["cpu_blocks"], report["kv_tokens"]) == (2000, 512, 32000)


def test_access_log_500s_are_counted() -> None:
    """HTTP 500 access-log lines are counted (engine-dead symptom); 200s are not."""
    lines = [
        '(APIServer pid=1) INFO:     1.2.3.4:5 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        '(APIServer pid=1) INFO:     1.2.3.4:6 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]
    assert run(lines)["http_500_count"] == 1


def test_marker_matcher_expected_and_forbidden() -> None:
    """Expected markers count only once the log shows them; forbidden ones are reported per line."""
    m = marker_matcher(
        [r"--mamba-ssm-cache-dtype='bfloat16' was passed", r"patch applied"], [r"errno=22", r"Traceback"]
    )
    assert m.missing == (r"--mamba-ssm-cache-dtype='bfloat16' was passed", r"patch applied")
    r1 = m.feed(
        "\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0;0m INFO 01-01 00:00:00 [config.py:1] "
        "--mamba-ssm-cache-dtype='bfloat16' was passed. Using the user-specified value."
    )
    assert r1.expected == (r"--mamba-ssm-cache-dtype='bfloat16' was passed",)
    assert r1.forbidden == ()
    complete_before = m.all_expected_seen
    assert complete_before is False
    r2 = m.feed("vllm-1  | WARNING 01-01 00:00:01 [patch.py:9] shard 3 failed errno=22")
    assert r2.forbidden == ("errno=22",)
    assert m.forbidden_seen == ("errno=22",)
    m.feed("INFO 01-01 00:00:02 [patch.py:10] patch applied")
    assert m.all_expected_seen
    m.reset()
    assert m.missing
    assert not m.forbidden_seen


def test_marker_matcher_rejects_bad_regex() -> None:
    """An invalid marker regex is a ValueError naming the pattern."""
    with pytest.raises(ValueError, match="invalid log marker"):
        marker_matcher(["(unclosed"], [])

"""vLLM log line envelopes, per-version message variants and the per-line classifier."""

# ruff: noqa: E501  -- verbatim log/exposition lines read better unsplit

from __future__ import annotations

import pytest

from supervisor.core.vllm.analyzer import (
    EngineDead,
    HangHint,
    KvPool,
    Line,
    Phase,
    Ready,
    ShardProgress,
    Shutdown,
    StartupFailure,
    classify,
    normalize,
)

KV_MSG = "GPU KV cache size: 1,069,759 tokens"


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        # 0.6/0.7: no brackets around file:line
        (f"INFO 10-17 12:00:00 gpu_executor.py:122] {KV_MSG}", Line(None, None, "INFO", KV_MSG)),
        # 0.8-0.9: brackets, no process prefix
        (f"INFO 06-02 11:03:18 [kv_cache_utils.py:637] {KV_MSG}", Line(None, None, "INFO", KV_MSG)),
        # 0.10/0.11: ANSI-coloured prefix even without a TTY
        (
            f"\x1b[1;36m(EngineCore_DP0 pid=123)\x1b[0;0m INFO 10-21 09:11:57 [kv_cache_utils.py:1087] {KV_MSG}",
            Line("EngineCore_DP0", 123, "INFO", KV_MSG),
        ),
        # the same with the ESC bytes lost (residue)
        (
            f"[1;36m(EngineCore_DP0 pid=123)[0;0m INFO 10-21 09:11:57 [kv_cache_utils.py:1087] {KV_MSG}",
            Line("EngineCore_DP0", 123, "INFO", KV_MSG),
        ),
        # 0.32+: prefix is part of the format
        (
            f"(EngineCore pid=24) WARNING 11-29 06:52:27 [kv_cache_utils.py:2327] {KV_MSG}",
            Line("EngineCore", 24, "WARNING", KV_MSG),
        ),
        # docker compose wrapper + \r\n continuation from NewLineFormatter
        (
            f"vllm-1  | (APIServer pid=1) ERROR 02-05 16:55:27 [core.py:1] {KV_MSG}\r",
            Line("APIServer", 1, "ERROR", KV_MSG),
        ),
        # docker logs -t
        (
            f"2025-06-02T11:03:18.123456789Z INFO 06-02 11:03:18 [kv_cache_utils.py:637] {KV_MSG}",
            Line(None, None, "INFO", KV_MSG),
        ),
        # journald with a localised month
        (
            f"авг 12 10:00:01 spark vllm[4242]: (APIServer pid=7) INFO 08-12 10:00:01 [a.py:1] {KV_MSG}",
            Line("APIServer", 7, "INFO", KV_MSG),
        ),
        # markdown quote + CI timestamp
        (f"> [2025-06-02T11:03:18.1Z] {KV_MSG}", Line(None, None, None, KV_MSG)),
        # terminal ^C glued to the first line
        (
            "^C(EngineCore pid=3) INFO 05-26 19:19:56 [core.py:1155] [shutdown] x",
            Line("EngineCore", 3, "INFO", "[shutdown] x"),
        ),
        # markdown damage [file:line[]
        (f"INFO 06-30 13:53:19 [core.py:515[] {KV_MSG}", Line(None, None, "INFO", KV_MSG)),
        # prefix alone on a line (tqdm interaction)
        ("(Worker_TP0 pid=1700) ", Line("Worker_TP0", 1700, None, "")),
        # uvicorn line: no vLLM header
        (
            "(APIServer pid=1) INFO:     Application startup complete.",
            Line("APIServer", 1, None, "INFO:     Application startup complete."),
        ),
        # 0.33 JSON formatter
        (
            '{"asctime": "x", "levelname": "INFO", "name": "vllm", "processName": "EngineCore", '
            f'"process": 9, "message": "{KV_MSG}"}}',
            Line("EngineCore", 9, "INFO", KV_MSG),
        ),
        # tqdm refreshes joined with \r: the last one counts
        ("Loading x:  10%\rLoading x:  20%\r", Line(None, None, None, "Loading x:  20%")),
    ],
)
def test_normalize_strips_every_envelope(raw: str, want: Line) -> None:
    """Wrappers, ANSI (with or without ESC), process prefix and header are stripped per docs/vllm-facts.md §2.1."""
    assert normalize(raw) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (
            "(EngineCore_DP0 pid=1) INFO 10-21 09:11:57 [kv_cache_utils.py:1087] GPU KV cache size: 425,424 tokens",
            KvPool(425424, None, None, "GPU"),
        ),
        (
            "INFO 10-21 09:11:57 [kv_cache_utils.py:1091] Maximum concurrency for 65,536 tokens per request: 6.49x",
            KvPool(None, 65536, 6.49, None),
        ),
        # V0: length without separators
        ("INFO 10-17 12:00:00 llm_engine.py:1] Maximum concurrency for 32768 tokens per request: 0.82x",
         KvPool(None, 32768, 0.82, None)),
        # 0.28+: merged line; 0.32 CPU build as seen running for real
        (
            "(EngineCore pid=24) INFO 11-29 06:52:27 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 "
            "tokens, Maximum concurrency for 512 tokens per request: 4096.00x",
            KvPool(2097152, 512, 4096.0, "CPU"),
        ),
        (
            "GPU + host KV cache size: 3,000,000 tokens, Maximum concurrency for 262,144 tokens per request: 11.44x",
            KvPool(3000000, 262144, 11.44, "GPU + host"),
        ),
        # V0 blocks (kv tokens = blocks x 16)
        ("INFO 10-17 12:00:00 gpu_executor.py:122] # GPU blocks: 2000, # CPU blocks: 512",
         KvPool(32000, None, None, "GPU")),
        ("INFO 01-01 00:00:00 [executor_base.py:1] # cuda blocks: 100, # CPU blocks: 0",
         KvPool(1600, None, None, "GPU")),
        ("Loading safetensors checkpoint shards:  45% Completed | 15/34 [00:10<00:12,  1.4it/s]",
         ShardProgress(45, 15, 34)),
        ("Loading safetensors checkpoint shards (eager):   0% Completed | 0/2 [00:00<?, ?it/s]",
         ShardProgress(0, 0, 2)),
        ("(APIServer pid=1) INFO:     Application startup complete.", Ready()),
        ("INFO 06-02 11:03:55 [core.py:167] init engine (profile, create kv cache, warmup model) took 90.84 seconds",
         Phase("engine_init_done")),
        ("init engine (profile, create kv cache, warmup model) took 2.91 s (compilation: 1.00 s)",
         Phase("engine_init_done")),
        ("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 15.52 GiB memory and 10.3 seconds",
         Phase("model_loaded")),
        ("INFO 01-01 00:00:00 model_runner.py:1] Loading model weights took 14.99 GB", Phase("model_loaded")),
        ("INFO 01-01 00:00:00 [default_loader.py:1] Loading weights took 9.12 seconds", Phase("weights_loaded")),
        ("INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 10.5 GiB", Phase("kv_cache")),
        ("Graph capturing finished in 5 secs.", Phase("graph_capture")),
        ("Capturing CUDA graphs (decode, FULL): 100%|████| 67/67 [00:03<00:00]", Phase("graph_capture")),
        ("INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.11.0", Phase("api_server_starting")),
        ("vLLM server version 0.33.0, serving model Qwen/Qwen3-8B", Phase("api_server_starting")),
        ("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: model=x",
         Phase("engine_starting")),
        ("INFO 01-01 00:00:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
         Phase("server_started")),
        ("Starting vLLM server on unix:/tmp/v.sock", Phase("server_started")),
        ("INFO 01-01 00:00:00 [launcher.py:1] Route: /health, Methods: GET", Phase("routes")),
        ("No available shared memory broadcast block found in 60 seconds. This typically happens when ...",
         HangHint(60)),
        ("(APIServer pid=1) INFO 01-01 00:00:00 [launcher.py:1] Shutting down FastAPI HTTP server.",
         Shutdown("Shutting down FastAPI HTTP server.")),
        ("ERROR 01-01 00:00:00 [core_client.py:1] Engine core proc EngineCore_DP0 died unexpectedly, shutting down "
         "client.", EngineDead("Engine core proc EngineCore_DP0 died unexpectedly")),
        ("[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
         EngineDead("engine core exited unexpectedly")),
        ('(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK', None),
        ("Free memory on device (31.44/47.38 GiB) on startup. Desired GPU memory utilization is (0.9, 42 GiB).",
         None),
        ("", None),
    ],
)  # fmt: skip
def test_classify_per_version_lines(raw: str, want: object) -> None:
    """Each docs/vllm-facts.md §3 format (across versions) yields its signal; benign look-alikes yield None."""
    assert classify(raw) == want


@pytest.mark.parametrize(
    ("raw", "outcome", "detail"),
    [
        (
            "ValueError: Free memory on device cuda:0 (19.77/22.05 GiB) on startup is less than desired GPU memory "
            "utilization (0.95, 20.95 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
            "processes.",
            "failed_gpu_mem_util",
            {"free_gib": 19.77, "total_gib": 22.05, "util": 0.95, "requested_gib": 20.95, "device": "cuda:0"},
        ),
        (
            "ValueError: To serve at least one request with the models's max seq len (262144), (24.00 GiB KV cache "
            "is needed, which is larger than the available KV cache memory (10.50 GiB). Based on the available "
            "memory, the estimated maximum model length is 114688. Try increasing `gpu_memory_utilization`",
            "failed_kv_insufficient",
            {"max_model_len": 262144, "needed_kv_gib": 24.0, "available_kv_gib": 10.5,
             "estimated_max_model_len": 114688},
        ),
        (
            "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
            "stored in KV cache (20000). Try increasing `gpu_memory_utilization`",
            "failed_kv_insufficient",
            {"max_model_len": 32768, "kv_capacity_tokens": 20000},
        ),
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.",
            "failed_no_kv_memory",
            {},
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "23.56 GiB of which 21.75 MiB is free.",
            "failed_oom",
            {"oom_tried_mib": 2048.0, "gpu_total_gib": 23.56, "gpu_free_mib": 21.75},
        ),
        ("RuntimeError: CUDA error: out of memory", "failed_oom", {}),
        (
            "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
            "proc(s): {}",
            "failed_engine_init",
            {"failed_procs": "{}"},
        ),
        ("(EngineCore_DP0 pid=2) ERROR 06-30 13:53:19 [core.py:515] EngineCore failed to start.",
         "failed_engine_init", {"where": "EngineCore failed to start"}),
        ("AssertionError: Error in memory profiling. Initial free memory 10, current free memory 5.",
         "failed_gpu_mem_util", {"profiling_error": True}),
    ],
)  # fmt: skip
def test_classify_startup_failures(raw: str, outcome: str, detail: dict[str, object]) -> None:
    """Every §3.1 startup failure maps to its outcome with its numbers as numbers."""
    sig = classify(raw)
    assert isinstance(sig, StartupFailure)
    assert sig.outcome == outcome
    assert sig.detail == detail


def test_source_code_echo_is_not_a_failure() -> None:
    """A traceback's echo of the raising source line proves nothing (anchor on the exception line)."""
    assert classify('    raise RuntimeError("Engine core initialization failed. "') is None
    assert classify('raise ValueError("No available memory for the cache blocks. "') is None
    assert classify('  File "/x/vllm/v1/engine/core.py", line 1, in EngineCore failed to start') is None
    assert isinstance(
        classify("RuntimeError: Engine core initialization failed. See root cause above."), StartupFailure
    )


def test_engine_dead_variants() -> None:
    """API-server and engine-core death lines of several versions are EngineDead."""
    for raw in (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above)",
        "(APIServer pid=1) ERROR 05-01 14:39:06 [async_llm.py:699] AsyncLLM output_handler failed.",
        "(EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1] EngineCore encountered a fatal error.",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.",
    ):
        assert isinstance(classify(raw), EngineDead), raw

"""What one vLLM log line means (docs/vllm-facts.md §3): the pure per-line classifier (progress rules here).

Every rule is guarded by a cheap substring test before its regex runs, so typical lines cost a few
``in`` checks. ``match_message`` also returns the numbers a line carries (keys named as in the diagnose
JSON) for :class:`supervisor.core.vllm.analyzer.LogAnalyzer`; ``classify`` returns only the signal.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from supervisor.core.vllm.envelope import split_line
from supervisor.core.vllm.failures import (
    _config,
    _core_failed,
    _dead,
    _free_mem,
    _init_failed,
    _kv_insufficient,
    _no_kv,
    _oom,
    _profiling,
    _ready_timeout,
    _shm,
    _shutdown,
)
from supervisor.core.vllm.types import (
    BOOT_START_PHASES,
    DEFAULT_BLOCK_SIZE,
    EngineDead,
    Fields,
    HangHint,
    KvPool,
    Phase,
    Ready,
    ShardProgress,
    Shutdown,
    Signal,
    StartupFailure,
)

__all__ = [
    "BOOT_START_PHASES",
    "DEFAULT_BLOCK_SIZE",
    "EngineDead",
    "Fields",
    "HangHint",
    "KvPool",
    "Phase",
    "Ready",
    "ShardProgress",
    "Shutdown",
    "Signal",
    "StartupFailure",
    "classify",
    "match_message",
]


def _int(s: str) -> int:
    return int(s.replace(",", ""))


# --- progress ---------------------------------------------------------------------------------------------

_SHARDS = re.compile(
    r"Loading (?:safetensors|pt|np_cache) checkpoint shards(?: \(eager\))?:\s+(?P<pct>\d+)% Completed \| "
    r"(?P<done>\d+)/(?P<total>\d+) \["
)
_KV_TOKENS = re.compile(r"(?P<dev>[A-Z]{2,5}(?: \+ host)?) KV cache size: (?P<tok>[\d,]+) tokens")
_MAX_CONC = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
_BLOCKS = re.compile(
    r"(?:# )?(?P<dev>GPU|cuda|CUDA|XPU|HPU|NPU|TPU) blocks: (?P<gpu>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?"
)
_AVAIL_KV = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_MODEL_LOAD = re.compile(
    r"Model loading took (?P<gib>[\d.]+) (?:GiB|GB)(?: memory)? and (?P<s>[\d.]+) seconds"
    r"|Loading model weights took (?P<gib2>[\d.]+) (?:GiB|GB)"
)
_WEIGHTS_READ = re.compile(r"Loading weights took (?P<s>[\d.]+) seconds")
_GRAPH = re.compile(r"Graph capturing finished in (?P<s>\d+) secs(?:, took (?P<gib>[\d.]+) GiB)?")
_INIT_ENGINE = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) (?:seconds|s)\b"
)
_NUM_GPU_BLOCKS = re.compile(r"cache_config_info with initialization after num_gpu_blocks is: (?P<n>\d+)")
_ENGINE_VERSION = re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(?P<v>[^)]+)\) with config")
_BANNER = re.compile(
    r"vLLM API server version (?P<v1>\S+)|vLLM server version (?P<v2>[^,\s]+), serving model (?P<m2>\S+)"
    r"|█ +version (?P<v3>\S+)|█ +model +(?P<m3>\S+)"
)
_SERVER_START = re.compile(r"Starting vLLM (?:API )?server(?: \d+)? on (?P<url>\S+)")
_HANG = re.compile(r"No available shared memory broadcast block found in (?P<s>\d+) seconds")


def _shards(msg: str) -> tuple[Signal, Fields] | None:
    m = _SHARDS.search(msg)
    if m is None:
        return None
    pct, done, total = int(m.group("pct")), int(m.group("done")), int(m.group("total"))
    return ShardProgress(pct, done, total), {"shards_pct": pct, "shards_done": done, "shards_total": total}


def _kv_size(msg: str) -> tuple[Signal, Fields] | None:
    m = _KV_TOKENS.search(msg)
    if m is None:
        return None
    tok, dev = _int(m.group("tok")), m.group("dev")
    f: Fields = {"kv_tokens": tok, "kv_device": dev}
    c = _MAX_CONC.search(msg, m.end())
    length = conc = None
    if c is not None:
        length, conc = _int(c.group("len")), float(c.group("x"))
        f.update(max_model_len=length, max_concurrency=conc)
    return KvPool(tok, length, conc, dev), f


def _max_conc(msg: str) -> tuple[Signal, Fields] | None:
    c = _MAX_CONC.search(msg)
    if c is None:
        return None
    length, conc = _int(c.group("len")), float(c.group("x"))
    return KvPool(None, length, conc, None), {"max_model_len": length, "max_concurrency": conc}


def _blocks(msg: str) -> tuple[Signal, Fields] | None:
    m = _BLOCKS.search(msg)
    if m is None:
        return None
    gpu = int(m.group("gpu"))
    dev = "GPU" if m.group("dev").lower() == "cuda" else m.group("dev")
    f: Fields = {"gpu_blocks": gpu}
    if m.group("cpu") is not None:
        f["cpu_blocks"] = int(m.group("cpu"))
    return KvPool(gpu * DEFAULT_BLOCK_SIZE, None, None, dev), f


def _phase(name: str, rx: re.Pattern[str], conv: Callable[[re.Match[str]], Fields]) -> _Rule:
    phase = Phase(name)  # signals are immutable: one instance per rule

    def rule(msg: str) -> tuple[Signal, Fields] | None:
        m = rx.search(msg)
        return None if m is None else (phase, conv(m))

    return rule


def _model_load_fields(m: re.Match[str]) -> Fields:
    if m.group("gib2"):
        return {"model_load_gib": float(m.group("gib2"))}
    return {"model_load_gib": float(m.group("gib")), "model_load_s": float(m.group("s"))}


def _graph_fields(m: re.Match[str]) -> Fields:
    f: Fields = {"graph_capture_s": int(m.group("s"))}
    if m.group("gib"):
        f["graph_gib"] = float(m.group("gib"))
    return f


def _banner_fields(m: re.Match[str]) -> Fields:
    f: Fields = {}
    v = m.group("v1") or m.group("v2") or m.group("v3")
    if v:
        f["version"] = v
    model = m.group("m2") or m.group("m3")
    if model:
        f["model"] = model
    return f


def _const(name: str) -> _Rule:
    phase = Phase(name)

    def rule(msg: str) -> tuple[Signal, Fields] | None:
        return phase, {}

    return rule


def _hang(msg: str) -> tuple[Signal, Fields] | None:
    m = _HANG.search(msg)
    if m is None:
        return None
    return HangHint(int(m.group("s"))), {"hang_hint_s": int(m.group("s"))}


_READY = Ready()


def _ready(msg: str) -> tuple[Signal, Fields] | None:
    return _READY, {}


_Rule = Callable[[str], "tuple[Signal, Fields] | None"]

# Rules are grouped behind cheap "hub" substrings so a line that matches nothing costs ~25 ``in`` tests.
# Within a group the order is the priority when one message could match several rules; failure rules
# (flag True) are skipped on source-code echo (``raise ValueError("No available memory ...``).
_Group = tuple[tuple[str, ...], tuple[tuple[str, _Rule, bool], ...]]
_GROUPS: tuple[_Group, ...] = (
    (
        ("memory",),
        (
            ("out of memory", _oom, True),
            ("not enough GPU memory", _oom, True),
            ("Free memory on device", _free_mem, True),
            ("Error in memory profiling", _profiling, True),
            ("No available memory for the cache blocks", _no_kv, True),
            (
                "Available KV cache memory",
                _phase("kv_cache", _AVAIL_KV, lambda m: {"available_kv_gib": float(m["gib"])}),
                False,
            ),
            ("No available shared memory broadcast block", _hang, False),
        ),
    ),
    (("max seq len",), (("max seq len", _kv_insufficient, True),)),
    (
        ("/dev/shm", "ValidationError", "model weights", ": error: "),  # noqa: S108 - log text, not a path
        (
            ("Insufficient space in /dev/shm", _shm, True),
            ("validation error", _config, True),
            ("Cannot find any model weights", _config, True),
            (": error: ", _config, True),
        ),
    ),
    (
        (
            "Engine",
            "WorkerProc",
            "Timed out",
            "unexpectedly",
            "output_handler",
            "fatal error",
            "Background loop",
        ),
        (
            ("Engine core initialization failed", _init_failed, True),
            ("EngineCore ", _core_failed, True),
            ("WorkerProc ", _core_failed, True),
            ("Timed out waiting for engine", _ready_timeout, True),
            ("EngineDeadError", _dead, False),
            ("output_handler failed", _dead, False),
            ("died unexpectedly", _dead, False),
            ("exited unexpectedly", _dead, False),
            ("encountered a fatal error", _dead, False),
            ("Background loop has errored", _dead, False),
            ("Engine loop is not running", _dead, False),
        ),
    ),
    (
        ("pplication", "hut", "server process", "KeyboardInterrupt"),
        (
            ("Application startup complete.", _ready, False),
            ("[shutdown]", _shutdown, False),
            ("Shutting down", _shutdown, False),
            ("Application shutdown complete", _shutdown, False),
            ("Finished server process", _shutdown, False),
            ("KeyboardInterrupt: terminated", _shutdown, False),
            ("Started server process", _const("uvicorn_starting"), False),
            ("Waiting for application startup", _const("uvicorn_starting"), False),
        ),
    ),
    (("checkpoint shards",), (("checkpoint shards", _shards, False),)),
    (
        ("KV cache", "concurrency", " blocks: "),
        (
            ("KV cache size:", _kv_size, False),
            ("Maximum concurrency for", _max_conc, False),
            (" blocks: ", _blocks, False),
        ),
    ),
    (
        ("took", "raph"),
        (
            (
                "Loading weights took",
                _phase("weights_loaded", _WEIGHTS_READ, lambda m: {"weights_load_s": float(m["s"])}),
                False,
            ),
            ("Model loading took", _phase("model_loaded", _MODEL_LOAD, _model_load_fields), False),
            ("Loading model weights took", _phase("model_loaded", _MODEL_LOAD, _model_load_fields), False),
            ("Graph capturing finished", _phase("graph_capture", _GRAPH, _graph_fields), False),
            ("Capturing CUDA graphs", _const("graph_capture"), False),
            (
                "init engine (profile",
                _phase("engine_init_done", _INIT_ENGINE, lambda m: {"init_engine_s": float(m["s"])}),
                False,
            ),
            ("Compiling a graph", _const("compile"), False),
        ),
    ),
    (
        ("num_gpu_blocks", "LLM engine", "version", "█", "args:"),
        (
            (
                "num_gpu_blocks is:",
                _phase("cache_config", _NUM_GPU_BLOCKS, lambda m: {"num_gpu_blocks": int(m["n"])}),
                False,
            ),
            (
                "LLM engine (v",
                _phase("engine_starting", _ENGINE_VERSION, lambda m: {"version": m["v"]}),
                False,
            ),
            ("server version", _phase("api_server_starting", _BANNER, _banner_fields), False),
            ("█", _phase("api_server_starting", _BANNER, _banner_fields), False),
            ("non-default args:", _const("api_server_starting"), False),
        ),
    ),
    (
        ("vLLM", "oute", "compile"),
        (
            (
                "Starting vLLM",
                _phase("server_started", _SERVER_START, lambda m: {"listen_url": m["url"]}),
                False,
            ),
            ("Available routes are", _const("routes"), False),
            ("Route: ", _const("routes"), False),
            ("torch.compile takes", _const("compile"), False),
        ),
    ),
)


def _is_source_echo(msg: str) -> bool:
    # Traceback/pytest echo of the raising source line: `raise ValueError("No available memory ...`
    return "raise " in msg and ('("' in msg or "('" in msg or msg.rstrip().endswith("("))


def match_message(msg: str) -> tuple[Signal | None, Fields]:
    """The most relevant signal of one bare message plus the numbers it carries."""
    if not msg or (msg.startswith("  ") and "█" not in msg):
        # indented traceback frames and echoed source lines never prove anything (docs/vllm-facts.md §2.1.7)
        return None, {}
    for hubs, rules in _GROUPS:
        for h in hubs:
            if h in msg:
                break
        else:
            continue
        for key, rule, failure in rules:
            if key in msg and not (failure and _is_source_echo(msg)):
                hit = rule(msg)
                if hit is not None:
                    return hit
    return None, {}


def classify(raw: str) -> Signal | None:
    """The single most relevant signal of one raw log line, or None."""
    return match_message(split_line(raw)[3])[0]

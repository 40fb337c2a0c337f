"""What one vLLM log line means (VLLM_FACTS §3): signal value objects and the pure classifier.

Every rule is guarded by a cheap substring test before its regex runs, so typical lines cost a few
``in`` checks. ``match_message`` also returns the numbers a line carries (keys named as in the diagnose
JSON) for :class:`supervisor.core.logparse.LogAnalyzer`; ``classify`` returns only the signal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from supervisor.core.vllmlog_envelope import split_line

DEFAULT_BLOCK_SIZE = 16

Fields = dict[str, Any]


@dataclass(frozen=True)
class ShardProgress:
    """tqdm ``Loading safetensors checkpoint shards: NN% Completed | i/n``."""

    pct: int
    done: int
    total: int


@dataclass(frozen=True)
class Phase:
    """A line proving the load moves on (``weights_loaded``, ``kv_cache``, ``graph_capture``, ...)."""

    name: str


@dataclass(frozen=True)
class KvPool:
    """KV cache capacity: tokens and/or max model length and concurrency (one or two lines)."""

    tokens: int | None
    max_model_len: int | None
    max_concurrency: float | None
    device: str | None


@dataclass(frozen=True)
class Ready:
    """uvicorn ``Application startup complete.``"""


@dataclass(frozen=True)
class StartupFailure:
    """A startup failure; ``outcome`` is one of the ``failed_*`` outcomes, ``detail`` its numbers."""

    outcome: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class EngineDead:
    """The engine core died (EngineDeadError, died unexpectedly, fatal error)."""

    detail: str


@dataclass(frozen=True)
class Shutdown:
    """The server is shutting down (signal, uvicorn shutdown, ``[shutdown]`` family)."""

    detail: str


@dataclass(frozen=True)
class HangHint:
    """``No available shared memory broadcast block found in N seconds``: a worker is slow or stuck."""

    seconds: int


Signal = ShardProgress | Phase | KvPool | Ready | StartupFailure | EngineDead | Shutdown | HangHint

FAILURE_RANK = {
    "failed_oom": 5,
    "failed_gpu_mem_util": 4,
    "failed_kv_insufficient": 3,
    "failed_no_kv_memory": 2,
    "failed_engine_init": 1,
}
CAUSE_OF = {
    "failed_oom": "oom",
    "failed_gpu_mem_util": "gpu_mem_util",
    "failed_kv_insufficient": "kv_insufficient",
    "failed_no_kv_memory": "no_kv_memory",
    "failed_engine_init": "engine_init",
}
BOOT_START_PHASES = frozenset({"api_server_starting", "engine_starting"})


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _int(s: str) -> int:
    return int(s.replace(",", ""))


_UNIT_MIB = {
    "B": 1 / 2**20,
    "KB": 1 / 1024,
    "KiB": 1 / 1024,
    "MB": 1.0,
    "MiB": 1.0,
    "GB": 1024.0,
    "GiB": 1024.0,
}


def _mib(amount: str, unit: str) -> float:
    return round(float(amount) * _UNIT_MIB.get(unit, 1.0), 4)


# --- failures -------------------------------------------------------------------------------------------

_OOM = re.compile(
    r"OutOfMemoryError: CUDA out of memory(?:\. Tried to allocate (?P<amt>[\d.]+) (?P<unit>[KMG]i?B))?"
    r"|CUDA (?:driver )?error: out of memory|Failed to load model - not enough GPU memory"
)
_OOM_TOTAL = re.compile(
    r"total capac(?:i)?ty of (?P<a>[\d.]+) (?P<u>[KMG]i?B)|(?P<b>[\d.]+) (?P<v>[KMG]i?B) total capac(?:i)?ty"
)
_OOM_FREE = re.compile(r"of which (?P<a>[\d.]+) (?P<u>[KMG]i?B) is free|(?P<b>[\d.]+) (?P<v>[KMG]i?B) free\b")
_FREE_MEM = re.compile(
    r"Free memory on device(?: (?P<dev>\S+))? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup "
    r"is less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"
)
_KV_INSUFF = re.compile(
    r"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\)"
    r"(?:, \((?P<need>[\d.]+) GiB KV\s*cache is needed, which is larger than the available KV cache memory"
    r" \((?P<avail>[\d.]+) GiB\))?"
)
_KV_EST = re.compile(r"the estimated maximum model length is (?P<est>\d+)")
_V0_KV_INSUFF = re.compile(
    r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<cap>\d+)\)"
)
_INIT_FAILED = re.compile(
    r"RuntimeError: Engine core initialization failed\. See root cause above\."
    r"(?: Failed core proc\(s\): (?P<procs>\{[^}]*\}))?"
)
_CORE_FAILED = re.compile(
    r"EngineCore (?:failed to start|hit an exception)|WorkerProc (?:initialization failed|failed to start)"
)


def _oom(msg: str) -> tuple[Signal, Fields] | None:
    m = _OOM.search(msg)
    if m is None:
        return None
    f: Fields = {}
    if m.group("amt"):
        f["oom_tried_mib"] = _mib(m.group("amt"), m.group("unit"))
    t = _OOM_TOTAL.search(msg)
    if t is not None:
        a, u = (t.group("a"), t.group("u")) if t.group("a") else (t.group("b"), t.group("v"))
        f["gpu_total_gib"] = round(_mib(a, u) / 1024, 4)
    fr = _OOM_FREE.search(msg)
    if fr is not None:
        a, u = (fr.group("a"), fr.group("u")) if fr.group("a") else (fr.group("b"), fr.group("v"))
        f["gpu_free_mib"] = _mib(a, u)
    return StartupFailure("failed_oom", dict(f)), f


def _free_mem(msg: str) -> tuple[Signal, Fields] | None:
    m = _FREE_MEM.search(msg)
    if m is None:
        return None
    f: Fields = {
        "free_gib": float(m.group("free")),
        "total_gib": float(m.group("total")),
        "util": float(m.group("util")),
        "requested_gib": float(m.group("req")),
    }
    if m.group("dev"):
        f["device"] = m.group("dev")
    return StartupFailure("failed_gpu_mem_util", dict(f)), f


def _profiling(msg: str) -> tuple[Signal, Fields] | None:
    f: Fields = {"profiling_error": True}
    return StartupFailure("failed_gpu_mem_util", dict(f)), f


def _kv_insufficient(msg: str) -> tuple[Signal, Fields] | None:
    m = _KV_INSUFF.search(msg)
    f: Fields = {}
    if m is not None:
        f["max_model_len"] = int(m.group("len"))
        if m.group("need"):
            f["needed_kv_gib"] = float(m.group("need"))
            f["available_kv_gib"] = float(m.group("avail"))
        e = _KV_EST.search(msg)
        if e is not None:
            f["estimated_max_model_len"] = int(e.group("est"))
    else:
        v0 = _V0_KV_INSUFF.search(msg)
        if v0 is None:
            return None
        f["max_model_len"] = int(v0.group("len"))
        f["kv_capacity_tokens"] = int(v0.group("cap"))
    return StartupFailure("failed_kv_insufficient", dict(f)), f


def _no_kv(msg: str) -> tuple[Signal, Fields] | None:
    return StartupFailure("failed_no_kv_memory", {}), {}


def _init_failed(msg: str) -> tuple[Signal, Fields] | None:
    m = _INIT_FAILED.search(msg)
    if m is None:
        return None
    f: Fields = {"failed_procs": m.group("procs")} if m.group("procs") else {}
    return StartupFailure("failed_engine_init", dict(f)), f


def _core_failed(msg: str) -> tuple[Signal, Fields] | None:
    m = _CORE_FAILED.search(msg)
    if m is None:
        return None
    return StartupFailure("failed_engine_init", {"where": m.group(0)}), {}


def _ready_timeout(msg: str) -> tuple[Signal, Fields] | None:
    return StartupFailure("failed_engine_init", {"where": "ready timeout"}), {"ready_timeout": True}


# --- runtime death / shutdown ----------------------------------------------------------------------------

_DEAD = re.compile(
    r"EngineDeadError|AsyncLLM output_handler failed|(?:Engine core proc|Worker proc) (?P<name>\S+) died "
    r"unexpectedly|engine core exited unexpectedly|EngineCore encountered a fatal error|Background loop has "
    r"errored already|Engine loop is not running"
)
_SHUTDOWN_SIG = re.compile(r"signal=(?P<sig>\w+)")
_SHUTDOWN_MODE = re.compile(r"mode=(?P<mode>\w+)(?: timeout=(?P<timeout>\d+)s)?")


def _dead(msg: str) -> tuple[Signal, Fields] | None:
    m = _DEAD.search(msg)
    if m is None:
        return None
    return EngineDead(m.group(0)), {}


def _shutdown(msg: str) -> tuple[Signal, Fields] | None:
    f: Fields = {}
    s = _SHUTDOWN_SIG.search(msg)
    if s is not None:
        f["signal"] = s.group("sig")
    mm = _SHUTDOWN_MODE.search(msg)
    if mm is not None:
        f["mode"] = mm.group("mode")
        if mm.group("timeout"):
            f["timeout_s"] = int(mm.group("timeout"))
    if "KeyboardInterrupt: terminated" in msg:
        f["signal"] = "SIGTERM"
    return Shutdown(msg.strip()[:200]), f


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
        # traceback frames and echoed source lines are indented; they never prove anything (VLLM_FACTS §2.1.7)
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
